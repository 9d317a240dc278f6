/* SHOAL_COMPRESS through the NCCL API, on one rank of a forked job. The
 * drop-in reads its settings once per process, so this program cannot turn
 * compression on for itself: it reads SHOAL_COMPRESS and SHOAL_COMPRESS_MIN
 * as the drop-in does and checks what they promise. With int8, float32,
 * float16 and bfloat16 sum and average all-reduces of SHOAL_COMPRESS_MIN
 * bytes (1 MiB unless set) or more come back within int8's error of the
 * exact result and, on two ranks or more, not equal to it for values that
 * int8 cannot hold: the proof that they went compressed. Smaller ones,
 * other types and other ops come back exact, and so do calls inside a
 * group (the stateless int8 call cannot be grouped). Unset, off or not understood
 * (the drop-in warns and leaves it off), every result is exact.
 * tests/test_nccl_compress.sh runs this case with SHOAL_COMPRESS=int8. */
#include "vendor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CMP_DEFAULT_MIN ((size_t)1 << 20)
/* The large calls: 4 MiB of float32, 2 MiB of the 16-bit types. */
#define CMP_BIG_COUNT ((size_t)1 << 20)
#define CMP_SMALL_COUNT 1031

typedef struct {
    ncclComm_t comm;
    int rank, n;
    bool int8;        /* SHOAL_COMPRESS=int8 */
    size_t min_bytes; /* SHOAL_COMPRESS_MIN */
    uint32_t salt;    /* advanced by every call, in the same order on every rank */
} cmp_t;

/* SHOAL_COMPRESS_MIN as the drop-in reads it: bytes, with K, M or G (and
 * an optional B); the default for text it would not take. */
static size_t cmp_min_bytes(void)
{
    const char *t = getenv("SHOAL_COMPRESS_MIN");
    if (!t || !*t || *t < '0' || *t > '9')
        return CMP_DEFAULT_MIN;
    char *end;
    unsigned long long v = strtoull(t, &end, 10);
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    return *end ? CMP_DEFAULT_MIN : (size_t)(v << shift);
}

/* Whether the drop-in compresses an all-reduce of count elements of dt
 * made outside a group. */
static bool cmp_compressed(const cmp_t *c, ncclDataType_t dt, ncclRedOp_t op, size_t count)
{
    if (!c->int8 || count == 0 || (op != ncclSum && op != ncclAvg))
        return false;
    if (dt != ncclFloat32 && dt != ncclFloat16 && dt != ncclBfloat16)
        return false;
    return count * vt_size(dt) >= c->min_bytes;
}

/* Rank r's input at index g: for float32, multiples of 2^-12 of up to 16
 * bits, which int8's 8 cannot hold, while every sum of up to 8 ranks is
 * exact in any order; for the 16-bit types, integers in -15..15, whose
 * sums are exact there. */
static double cmp_value(ncclDataType_t dt, int r, size_t g, uint32_t salt)
{
    uint32_t h = vt_mix((uint32_t)g * 0x9e3779b1U ^ vt_mix(salt * 0x85ebca77U + (uint32_t)r));
    if (dt == ncclFloat32)
        return (double)((int32_t)(h % 65535U) - 32767) / 4096.0;
    return (double)((int32_t)(h % 31U) - 15);
}

static double cmp_max_abs(ncclDataType_t dt)
{
    return dt == ncclFloat32 ? 32767.0 / 4096.0 : 15.0;
}

static void cmp_fill(void *buf, ncclDataType_t dt, int r, size_t count, uint32_t salt)
{
    for (size_t g = 0; g < count; g++)
        vt_store(dt, buf, g, (vt_val_t){.f = cmp_value(dt, r, g, salt)});
}

/* The exact result at index g, rounded to dt as a full-precision
 * all-reduce would give it (sums exactly; averages within an ulp). */
static double cmp_exact(const cmp_t *c, ncclDataType_t dt, ncclRedOp_t op, size_t g,
                        uint32_t salt)
{
    double sum = 0;
    for (int r = 0; r < c->n; r++)
        sum += cmp_value(dt, r, g, salt);
    return op == ncclAvg ? sum / c->n : sum;
}

/* A 64-bit FNV-1a of the result; every rank must hold the same. */
static uint64_t cmp_hash(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void cmp_same_everywhere(cmp_t *c, const char *what, const void *buf, size_t len)
{
    uint64_t mine = cmp_hash(buf, len);
    uint64_t *all = vt_alloc((size_t)c->n * sizeof(uint64_t));
    char w[320];
    snprintf(w, sizeof(w), "%s: ncclAllGather of the results' hashes", what);
    if (vt_rc(w, ncclAllGather(&mine, all, 1, ncclUint64, c->comm, VT_STREAM), ncclSuccess)) {
        for (int r = 0; r < c->n; r++) {
            if (all[r] != mine) {
                vt_fail("%s: rank %d's result differs from this rank's", what, r);
                break;
            }
        }
    }
    free(all);
}

/* got against the exact result. Compressed: within int8's error (in norm,
 * and per element within what every requantisation of a partial sum could
 * lose), and on two ranks or more most elements not equal to the exact
 * value. Otherwise equal (averages within two ulps). */
static void cmp_check(cmp_t *c, const char *what, const void *got, ncclDataType_t dt,
                      ncclRedOp_t op, size_t count, uint32_t salt, bool grouped)
{
    bool compressed = !grouped && cmp_compressed(c, dt, op, count);
    double n = c->n, e2 = 0, x2 = 0, worst = 0;
    size_t differ = 0, bad = 0, first = 0;
    double first_got = 0, first_want = 0;
    /* Each of up to n quantisations loses half a step of a block whose
     * largest value is at most n times the inputs' (twice that, for
     * margin), plus the 16-bit types' own rounding of the result. */
    double bound = n * n * cmp_max_abs(dt) / 127.0 + (dt == ncclFloat32 ? 0 : 0.5);
    if (op == ncclAvg)
        bound /= n;
    /* Two ulps of the type, relative to the value. */
    double avg_tol = dt == ncclFloat32 ? 0x1p-22 : dt == ncclFloat16 ? 0x1p-9 : 0x1p-6;
    for (size_t g = 0; g < count; g++) {
        double want = cmp_exact(c, dt, op, g, salt);
        vt_val_t rounded;
        unsigned char tmp[8];
        vt_store(dt, tmp, 0, (vt_val_t){.f = want});
        rounded = vt_load(dt, tmp, 0);
        double v = vt_load(dt, got, g).f;
        double d = fabs(v - want);
        e2 += (v - want) * (v - want);
        x2 += want * want;
        differ += v != rounded.f;
        worst = d > worst ? d : worst;
        bool ok;
        if (compressed)
            ok = d <= bound;
        else if (op == ncclAvg)
            ok = d <= fabs(want) * avg_tol;
        else
            ok = v == rounded.f;
        if (!ok && !bad++) {
            first = g;
            first_got = v;
            first_want = want;
        }
    }
    if (bad)
        vt_fail("%s: element %zu of %zu: got %.9g expected %.9g%s (%zu elements off)", what,
                first, count, first_got, first_want,
                compressed ? " within int8's error" : " exactly", bad);
    if (!compressed)
        return;
    double rel = x2 > 0 ? sqrt(e2 / x2) : 0;
    double rel_max = dt == ncclFloat32 ? 1e-2 : 2e-2;
    if (!(rel <= rel_max))
        vt_fail("%s: ||got - exact|| / ||exact|| = %.3g, above int8's %.0e (worst element "
                "off by %.3g)", what, rel, rel_max, worst);
    if (c->n >= 2 && dt == ncclFloat32 && differ <= count / 2)
        vt_fail("%s: only %zu of %zu elements differ from the exact sum: the call was not "
                "compressed", what, differ, count);
}

/* One all-reduce of count elements with this file's inputs. */
static void cmp_allreduce(cmp_t *c, ncclDataType_t dt, ncclRedOp_t op, size_t count,
                          bool inplace)
{
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt);
    char what[160];
    snprintf(what, sizeof(what), "ncclAllReduce %s %s count %zu %s (%s)", vt_dtype_name(dt),
             vt_op_name(op), count, inplace ? "in place" : "out of place",
             cmp_compressed(c, dt, op, count) ? "compressed" : "exact");
    void *send = vt_alloc(len);
    cmp_fill(send, dt, c->rank, count, salt);
    void *recv = inplace ? send : vt_alloc(len);
    if (vt_rc(what, ncclAllReduce(send, recv, count, dt, op, c->comm, VT_STREAM), ncclSuccess)) {
        cmp_check(c, what, recv, dt, op, count, salt, false);
        vt_check_sentinel(what, recv, len, len + VT_GUARD);
        cmp_same_everywhere(c, what, recv, len);
        if (!inplace) {
            unsigned char *want = vt_alloc(len);
            cmp_fill(want, dt, c->rank, count, salt);
            if (memcmp(want, send, len))
                vt_fail("%s: the send buffer changed", what);
            free(want);
        }
    }
    if (!inplace)
        free(recv);
    free(send);
}

/* A type or op the setting leaves alone, with the reference's inputs. */
static void cmp_exact_ref(cmp_t *c, ncclDataType_t dt, ncclRedOp_t op, size_t count)
{
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt);
    char what[160];
    snprintf(what, sizeof(what), "ncclAllReduce %s %s count %zu (exact)", vt_dtype_name(dt),
             vt_op_name(op), count);
    void *send = vt_alloc(len);
    void *recv = vt_alloc(len);
    vt_fill_input(send, dt, op, c->rank, c->n, 0, count, salt);
    if (vt_rc(what, ncclAllReduce(send, recv, count, dt, op, c->comm, VT_STREAM), ncclSuccess))
        vt_check_reduced(what, recv, dt, op, c->n, 0, count, salt);
    free(recv);
    free(send);
}

/* In a group, where even a large float sum stays exact. */
static void cmp_group(cmp_t *c)
{
    uint32_t salt = ++c->salt, salt2 = ++c->salt;
    size_t len = CMP_BIG_COUNT * 4, len2 = CMP_SMALL_COUNT * 4;
    const char *what = "ncclAllReduce float32 sum (large, exact) and int32 sum in one group";
    void *big = vt_alloc(len), *small = vt_alloc(len2), *out = vt_alloc(len2);
    cmp_fill(big, ncclFloat32, c->rank, CMP_BIG_COUNT, salt);
    vt_fill_input(small, ncclInt32, ncclSum, c->rank, c->n, 0, CMP_SMALL_COUNT, salt2);
    bool ok = vt_rc(what, ncclGroupStart(), ncclSuccess);
    ok &= vt_rc(what, ncclAllReduce(big, big, CMP_BIG_COUNT, ncclFloat32, ncclSum, c->comm,
                                    VT_STREAM), ncclSuccess);
    ok &= vt_rc(what, ncclAllReduce(small, out, CMP_SMALL_COUNT, ncclInt32, ncclSum, c->comm,
                                    VT_STREAM), ncclSuccess);
    ok &= vt_rc(what, ncclGroupEnd(), ncclSuccess);
    if (ok) {
        cmp_check(c, what, big, ncclFloat32, ncclSum, CMP_BIG_COUNT, salt, true);
        vt_check_reduced(what, out, ncclInt32, ncclSum, c->n, 0, CMP_SMALL_COUNT, salt2);
    }
    free(out);
    free(small);
    free(big);
}

/* A non-blocking communicator: an exact all-reduce left in flight, then a
 * compressed one (which completes before it returns), both checked once
 * the communicator reports completion. */
static void cmp_nonblocking(cmp_t *c, const ncclUniqueId *id)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nb = NULL;
    const char *what = "ncclCommInitRankConfig(blocking 0)";
    if (!vt_rc2(what, ncclCommInitRankConfig(&nb, c->n, *id, c->rank, &cfg), ncclSuccess,
                ncclInProgress))
        return;
    if (!nb) {
        vt_fail("%s: comm got NULL", what);
        return;
    }
    if (!vt_rc(what, vt_wait_comm(nb, what), ncclSuccess))
        return;
    uint32_t salt = ++c->salt, salt2 = ++c->salt;
    size_t len = CMP_BIG_COUNT * 4;
    void *big = vt_alloc(len), *out = vt_alloc(len);
    void *ints = vt_alloc(CMP_SMALL_COUNT * 4), *ints_out = vt_alloc(CMP_SMALL_COUNT * 4);
    vt_fill_input(ints, ncclInt32, ncclSum, c->rank, c->n, 0, CMP_SMALL_COUNT, salt2);
    cmp_fill(big, ncclFloat32, c->rank, CMP_BIG_COUNT, salt);
    what = "non-blocking comm: ncclAllReduce int32 sum, then float32 sum (large)";
    bool ok = vt_rc2(what, ncclAllReduce(ints, ints_out, CMP_SMALL_COUNT, ncclInt32, ncclSum, nb,
                                         VT_STREAM), ncclSuccess, ncclInProgress);
    ok &= vt_rc2(what, ncclAllReduce(big, out, CMP_BIG_COUNT, ncclFloat32, ncclSum, nb,
                                     VT_STREAM), ncclSuccess, ncclInProgress);
    if (ok && vt_rc(what, vt_wait_comm(nb, what), ncclSuccess)) {
        vt_check_reduced(what, ints_out, ncclInt32, ncclSum, c->n, 0, CMP_SMALL_COUNT, salt2);
        cmp_check(c, what, out, ncclFloat32, ncclSum, CMP_BIG_COUNT, salt, false);
    }
    free(ints_out), free(ints), free(out), free(big);
    what = "ncclCommFinalize(non-blocking comm)";
    if (vt_rc2(what, ncclCommFinalize(nb), ncclSuccess, ncclInProgress))
        vt_rc(what, vt_wait_comm(nb, what), ncclSuccess);
    VT_RC(ncclCommDestroy(nb), ncclSuccess);
}

int vt_compress_rank(int rank, int nranks, const vt_ids_t *ids)
{
    const char *setting = getenv("SHOAL_COMPRESS");
    cmp_t c = {.rank = rank, .n = nranks, .int8 = setting && !strcasecmp(setting, "int8"),
               .min_bytes = cmp_min_bytes()};
    if (!VT_RC(ncclCommInitRank(&c.comm, nranks, ids->id[VT_ID_MAIN], rank), ncclSuccess))
        return 1;
    /* The threshold in float32 elements: at it, and one below. */
    size_t at = (c.min_bytes + 3) / 4;
    cmp_allreduce(&c, ncclFloat32, ncclSum, CMP_BIG_COUNT, false);
    cmp_allreduce(&c, ncclFloat32, ncclSum, CMP_BIG_COUNT, true);
    cmp_allreduce(&c, ncclFloat32, ncclAvg, CMP_BIG_COUNT, false);
    cmp_allreduce(&c, ncclBfloat16, ncclSum, CMP_BIG_COUNT, false);
    cmp_allreduce(&c, ncclFloat16, ncclAvg, CMP_BIG_COUNT, true);
    if (at > 0 && at <= 4 * CMP_BIG_COUNT) {
        cmp_allreduce(&c, ncclFloat32, ncclSum, at, false);
        cmp_allreduce(&c, ncclFloat32, ncclSum, at - 1, false);
    }
    cmp_allreduce(&c, ncclFloat32, ncclSum, CMP_SMALL_COUNT, false);
    cmp_exact_ref(&c, ncclInt32, ncclSum, CMP_BIG_COUNT);
    cmp_exact_ref(&c, ncclFloat32, ncclMax, CMP_BIG_COUNT);
    cmp_exact_ref(&c, ncclFloat64, ncclSum, CMP_BIG_COUNT / 2);
    cmp_group(&c);
    cmp_nonblocking(&c, &ids->id[VT_ID_CONFIG]);
    VT_RC(ncclCommDestroy(c.comm), ncclSuccess);
    return 0;
}
