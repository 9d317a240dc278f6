/* SHOAL_COMPRESS_ALLGATHER and SHOAL_COMPRESS_REDUCESCATTER through the
 * NCCL API, on the ranks of a forked job: what the drop-in promises for
 * them, read from the same variables it reads.
 *
 * - A compressed call (float32, float16 or bfloat16, two ranks or more,
 *   outside a group, nranks x count values of SHOAL_COMPRESS_MIN bytes or
 *   more, and for the reduce-scatter ncclSum or ncclAvg) comes back within
 *   the error the setting's documentation states, computed here per value
 *   from the inputs' blocks of 64; for float32 inputs of 16 significant
 *   bits, which 8 or 4 bits cannot hold, most values differ from the exact
 *   result: the proof that the call went compressed. The all-gather's
 *   output is bitwise the same on every rank. A repeated call gives the
 *   same bits (nothing is kept between calls).
 * - sign's reduce-scatter is checked against its own definition (each
 *   other rank's contribution is sign(x) times its block's mean |x|, the
 *   owner's own values exact) and for finiteness.
 * - Anything else (one rank, small buffers, int32, ncclMax, calls in a
 *   group) comes back exact. The calls that must stay plain have counts
 *   of their own, so that tests/test_nccl_compress.sh can also check that
 *   the drop-in's log has no compressed line for them, and one for every
 *   call that must compress.
 *
 * vendor_test.c runs it as a case of its own ("SHOAL_COMPRESS_ALLGATHER
 * and _REDUCESCATTER: ...", 1 to 3 ranks). The drop-in reads its settings
 * once per process, so the program cannot turn them on for itself: it
 * reads them as the drop-in does, and with both unset (the whole suite's
 * run) every call must come back exact. tests/test_nccl_compress.sh runs
 * the case under each setting. */
#include "vendor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CC_DEFAULT_MIN ((size_t)1 << 20)
/* Per-rank counts. BIG: its buffers of nranks x BIG values reach the
 * default SHOAL_COMPRESS_MIN on two ranks in every float type. The plain
 * cases' counts differ from every compressed one's (the log check). */
#define CC_BIG ((size_t)1 << 18)
#define CC_SMALL 1031
#define CC_INT32 (CC_BIG + 1)
#define CC_MAX (CC_BIG + 2)
#define CC_GROUP (CC_BIG + 3)
#define CC_BLOCK 64

/* The kinds, as the drop-in reads its settings. */
enum { CC_OFF, CC_INT8, CC_INT4, CC_SIGN };

typedef struct {
    ncclComm_t comm;
    int rank, n;
    int ag, rs;       /* SHOAL_COMPRESS_ALLGATHER, SHOAL_COMPRESS_REDUCESCATTER */
    size_t min_bytes; /* SHOAL_COMPRESS_MIN */
    uint32_t salt;    /* advanced by every call, in the same order on every rank */
    bool nonblocking; /* comm is non-blocking: calls may return ncclInProgress */
} cc_t;

/* A call's return code: ncclSuccess, or on a non-blocking communicator
 * ncclInProgress too, after which the communicator must report that the
 * operations completed. */
static bool cc_rc(const cc_t *c, const char *what, ncclResult_t rc)
{
    if (!c->nonblocking)
        return vt_rc(what, rc, ncclSuccess);
    return vt_rc2(what, rc, ncclSuccess, ncclInProgress) &&
           vt_rc(what, vt_wait_comm(c->comm, what), ncclSuccess);
}

/* off, int8, int4 and (for the reduce-scatter) sign; anything else is
 * off, as the drop-in takes it (with a warning). */
static int cc_kind(const char *name, bool sign_ok)
{
    const char *t = getenv(name);
    if (!t)
        return CC_OFF;
    if (!strcasecmp(t, "int8"))
        return CC_INT8;
    if (!strcasecmp(t, "int4"))
        return CC_INT4;
    if (sign_ok && !strcasecmp(t, "sign"))
        return CC_SIGN;
    return CC_OFF;
}

static const char *cc_kind_name(int kind)
{
    static const char *const names[] = {"off", "int8", "int4", "sign"};
    return names[kind];
}

/* SHOAL_COMPRESS_MIN as the drop-in reads it: bytes, with K, M or G (and
 * an optional B); the default for text it would not take. */
static size_t cc_min_bytes(void)
{
    const char *t = getenv("SHOAL_COMPRESS_MIN");
    if (!t || !*t || *t < '0' || *t > '9')
        return CC_DEFAULT_MIN;
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
    return *end ? CC_DEFAULT_MIN : (size_t)(v << shift);
}

static bool cc_float(ncclDataType_t dt)
{
    return dt == ncclFloat32 || dt == ncclFloat16 || dt == ncclBfloat16;
}

/* The kind the drop-in compresses a call of count values per rank with,
 * outside a group; CC_OFF for the plain call. */
static int cc_compressed(const cc_t *c, int kind, ncclDataType_t dt, ncclRedOp_t op,
                         size_t count)
{
    if (kind == CC_OFF || c->n < 2 || count == 0 || !cc_float(dt))
        return CC_OFF;
    if (op != ncclSum && op != ncclAvg)
        return CC_OFF;
    return count * (size_t)c->n * vt_size(dt) >= c->min_bytes ? kind : CC_OFF;
}

/* Rank r's input at index g (of its send buffer): for float32, multiples
 * of 2^-12 of up to 16 significant bits, which neither 8 nor 4 bits hold,
 * while every sum of up to 8 ranks is exact; for the 16-bit types,
 * integers in -15..15, whose sums are exact there. */
static double cc_value(ncclDataType_t dt, int r, size_t g, uint32_t salt)
{
    uint32_t h = vt_mix((uint32_t)g * 0x9e3779b1U ^ vt_mix(salt * 0x85ebca77U + (uint32_t)r));
    if (dt == ncclFloat32)
        return (double)((int32_t)(h % 65535U) - 32767) / 4096.0;
    return (double)((int32_t)(h % 31U) - 15);
}

static void cc_fill(void *buf, ncclDataType_t dt, int r, size_t count, uint32_t salt)
{
    for (size_t g = 0; g < count; g++)
        vt_store(dt, buf, g, (vt_val_t){.f = cc_value(dt, r, g, salt)});
}

/* Largest |value| and mean |value| of the block of 64 that holds index i
 * of rank r's run [first, first + count) of inputs, the blocks counted
 * from first (each rank encodes its count values, or each block of the
 * reduce-scatter's input, from its start). */
static void cc_block(ncclDataType_t dt, int r, size_t first, size_t count, size_t i,
                     uint32_t salt, double *amax_p, double *mean_p)
{
    /* The last block of each rank's run, since the checks walk the values
     * in order. */
    static struct {
        bool valid;
        ncclDataType_t dt;
        size_t first, count, b0;
        uint32_t salt;
        double amax, mean;
    } memo[8];
    size_t b0 = i / CC_BLOCK * CC_BLOCK, b1 = b0 + CC_BLOCK < count ? b0 + CC_BLOCK : count;
    if (memo[r].valid && memo[r].dt == dt && memo[r].first == first && memo[r].count == count &&
        memo[r].b0 == b0 &&
        memo[r].salt == salt) {
        *amax_p = memo[r].amax;
        *mean_p = memo[r].mean;
        return;
    }
    double amax = 0, sum = 0;
    for (size_t k = b0; k < b1; k++) {
        double a = fabs(cc_value(dt, r, first + k, salt));
        amax = a > amax ? a : amax;
        sum += a;
    }
    *amax_p = amax;
    *mean_p = (double)(float)(sum / (double)(b1 - b0));
    memo[r].valid = true;
    memo[r].dt = dt;
    memo[r].first = first;
    memo[r].count = count;
    memo[r].b0 = b0;
    memo[r].salt = salt;
    memo[r].amax = *amax_p;
    memo[r].mean = *mean_p;
}

/* Half a step of kind for a block whose largest |value| is amax, and the
 * fp32 roundings of the codec's scale and product (below 2^-16 of the
 * scale). */
static double cc_half_step(int kind, double amax)
{
    double q = kind == CC_INT8 ? 127.0 : 7.0;
    return amax / (2 * q) + amax / q * 0x1p-16;
}

/* What rounding to dt adds to a value near v: half an ulp, relative. */
static double cc_round_tol(ncclDataType_t dt, double v)
{
    double rel = dt == ncclFloat32 ? 0x1p-24 : dt == ncclFloat16 ? 0x1p-11 : 0x1p-8;
    return fabs(v) * rel * 1.0001;
}

/* A 64-bit FNV-1a of the result; every rank must hold the same. */
static uint64_t cc_hash(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void cc_same_everywhere(cc_t *c, const char *what, const void *buf, size_t len)
{
    uint64_t mine = cc_hash(buf, len);
    uint64_t *all = vt_alloc((size_t)c->n * sizeof(uint64_t));
    char w[320];
    snprintf(w, sizeof(w), "%s: ncclAllGather of the results' hashes", what);
    if (cc_rc(c, w, ncclAllGather(&mine, all, 1, ncclUint64, c->comm, VT_STREAM))) {
        for (int r = 0; r < c->n; r++) {
            if (all[r] != mine) {
                vt_fail("%s: rank %d's result differs from this rank's", what, r);
                break;
            }
        }
    }
    free(all);
}

/* One element's verdict, and the summary of a buffer's. */
typedef struct {
    size_t bad, first, differ, count;
    double first_got, first_want, first_bound;
    bool finite;
} cc_tally_t;

/* got against want within bound; exact is the exact result, which a
 * compressed call mostly misses. */
static void cc_tally(cc_tally_t *t, size_t g, double got, double want, double bound,
                     double exact)
{
    t->count++;
    t->differ += got != exact;
    t->finite &= isfinite(got) != 0;
    if (!(fabs(got - want) <= bound) && !t->bad++) {
        t->first = g;
        t->first_got = got;
        t->first_want = want;
        t->first_bound = bound;
    }
}

static void cc_report(const char *what, const cc_tally_t *t, int kind, ncclDataType_t dt)
{
    if (!t->finite)
        vt_fail("%s: a value is not finite", what);
    if (t->bad)
        vt_fail("%s: element %zu of %zu: got %.9g expected %.9g %s %.3g (%zu elements off)",
                what, t->first, t->count, t->first_got, t->first_want,
                kind ? "within" : "exactly, off by at most", t->first_bound, t->bad);
    /* Values of 16 significant bits: a compressed call changes most. */
    if (kind && dt == ncclFloat32 && t->differ <= t->count / 2)
        vt_fail("%s: only %zu of %zu elements differ from the exact result: the call was "
                "not compressed", what, t->differ, t->count);
}

/* ---- all-gather ------------------------------------------------------------ */

/* The all-gather of count values of dt per rank with this file's inputs
 * (in place: this rank's block of recvbuff is the send buffer), checked;
 * *hash_p (if not NULL) gets the result's hash. in_group: between
 * ncclGroupStart and ncclGroupEnd, with an int32 all-gather beside it. */
static void cc_allgather(cc_t *c, ncclDataType_t dt, size_t count, bool inplace, bool in_group,
                         uint32_t salt, uint64_t *hash_p)
{
    size_t es = vt_size(dt), len = count * es, all = len * (size_t)c->n;
    int kind = in_group ? CC_OFF : cc_compressed(c, c->ag, dt, ncclSum, count);
    char what[200];
    snprintf(what, sizeof(what), "ncclAllGather %s count %zu x %d ranks %s%s (%s)",
             vt_dtype_name(dt), count, c->n, inplace ? "in place" : "out of place",
             in_group ? " in a group" : "", kind ? cc_kind_name(kind) : "exact");
    unsigned char *recv = vt_alloc(all);
    unsigned char *send = inplace ? recv + (size_t)c->rank * len : vt_alloc(len);
    cc_fill(send, dt, c->rank, count, salt);
    uint32_t salt2 = ++c->salt;
    int32_t *ints = NULL, *ints_out = NULL;
    bool ok = true;
    if (in_group) {
        ints = vt_alloc(CC_SMALL * 4);
        ints_out = vt_alloc(CC_SMALL * 4 * (size_t)c->n);
        vt_fill_bytes(ints, 0, CC_SMALL * 4, c->rank, salt2);
        ok &= vt_rc(what, ncclGroupStart(), ncclSuccess);
    }
    ok &= cc_rc(c, what, ncclAllGather(send, recv, count, dt, c->comm, VT_STREAM));
    if (in_group) {
        ok &= vt_rc(what, ncclAllGather(ints, ints_out, CC_SMALL, ncclInt32, c->comm, VT_STREAM),
                    ncclSuccess);
        ok &= vt_rc(what, ncclGroupEnd(), ncclSuccess);
    }
    if (ok) {
        cc_tally_t t = {.finite = true};
        for (int r = 0; r < c->n; r++) {
            for (size_t i = 0; i < count; i++) {
                double want = cc_value(dt, r, i, salt), amax = 0, mean;
                double got = vt_load(dt, recv, (size_t)r * count + i).f;
                if (kind)
                    cc_block(dt, r, 0, count, i, salt, &amax, &mean);
                double bound = kind ? cc_half_step(kind, amax) + cc_round_tol(dt, want) : 0;
                cc_tally(&t, (size_t)r * count + i, got, want, bound, want);
            }
        }
        cc_report(what, &t, kind, dt);
        vt_check_sentinel(what, recv, all, all + VT_GUARD);
        cc_same_everywhere(c, what, recv, all);
        if (!inplace) {
            unsigned char *want = vt_alloc(len);
            cc_fill(want, dt, c->rank, count, salt);
            if (memcmp(want, send, len))
                vt_fail("%s: the send buffer changed", what);
            free(want);
        }
        if (in_group) {
            for (int r = 0; r < c->n; r++)
                vt_check_bytes(what, ints_out + (size_t)r * CC_SMALL, ncclInt32, 0,
                               CC_SMALL * 4, r, salt2);
        }
        if (hash_p)
            *hash_p = cc_hash(recv, all);
    }
    free(ints_out);
    free(ints);
    if (!inplace)
        free(send);
    free(recv);
}

/* An all-gather the setting leaves alone: int32, bytes checked. */
static void cc_allgather_int32(cc_t *c)
{
    uint32_t salt = ++c->salt;
    size_t len = CC_INT32 * 4;
    char what[160];
    snprintf(what, sizeof(what), "ncclAllGather int32 count %zu x %d ranks (exact)",
             (size_t)CC_INT32, c->n);
    unsigned char *send = vt_alloc(len), *recv = vt_alloc(len * (size_t)c->n);
    vt_fill_bytes(send, 0, len, c->rank, salt);
    if (vt_rc(what, ncclAllGather(send, recv, CC_INT32, ncclInt32, c->comm, VT_STREAM),
              ncclSuccess)) {
        for (int r = 0; r < c->n; r++)
            vt_check_bytes(what, recv + (size_t)r * len, ncclInt32, 0, len, r, salt);
    }
    free(recv);
    free(send);
}

/* ---- reduce-scatter --------------------------------------------------------- */

/* Element i of this rank's result: the exact one and the bound kind's
 * documentation states (sign: its own definition's value, which want_p
 * then holds). */
static void cc_rs_expect(const cc_t *c, int kind, ncclDataType_t dt, ncclRedOp_t op,
                         size_t count, size_t i, uint32_t salt, double *want_p,
                         double *bound_p, double *exact_p)
{
    size_t first = (size_t)c->rank * count;
    double exact = 0, sign_ref = 0, err = 0, mags = 0;
    for (int r = 0; r < c->n; r++) {
        double x = cc_value(dt, r, first + i, salt);
        exact += x;
        mags += fabs(x);
        if (r == c->rank || !kind) {
            sign_ref += x;
            continue;
        }
        double amax, mean;
        cc_block(dt, r, first, count, i, salt, &amax, &mean);
        if (kind == CC_SIGN) {
            sign_ref += x < 0 ? -mean : mean;
            mags += mean;
            err += mean * 0x1p-20; /* its fp32 rounding, with margin */
        } else {
            err += cc_half_step(kind, amax);
        }
    }
    double want = kind == CC_SIGN ? sign_ref : exact;
    *exact_p = op == ncclAvg ? exact / c->n : exact;
    /* fp32's sum of n terms, each partial sum rounded. */
    err += kind ? mags * c->n * 0x1p-24 : 0;
    if (op == ncclAvg) {
        want /= c->n;
        err /= c->n;
        err += fabs(want) * 0x1p-23;
    }
    /* The result rounded to dt; a plain average within two ulps of it. */
    if (kind || op == ncclAvg)
        err += cc_round_tol(dt, fabs(want) + err) * (kind ? 1 : 4);
    *want_p = want;
    *bound_p = err;
}

/* The reduce-scatter of count values of dt per rank with this file's
 * inputs (in place: recvbuff is this rank's block of the send buffer),
 * checked; *hash_p gets the result's hash. */
static void cc_reduce_scatter(cc_t *c, ncclDataType_t dt, ncclRedOp_t op, size_t count,
                              bool inplace, bool in_group, uint32_t salt, uint64_t *hash_p)
{
    size_t es = vt_size(dt), len = count * es, all = len * (size_t)c->n;
    int kind = in_group ? CC_OFF : cc_compressed(c, c->rs, dt, op, count);
    char what[200];
    snprintf(what, sizeof(what), "ncclReduceScatter %s %s count %zu x %d ranks %s%s (%s)",
             vt_dtype_name(dt), vt_op_name(op), count, c->n,
             inplace ? "in place" : "out of place", in_group ? " in a group" : "",
             kind ? cc_kind_name(kind) : "exact");
    unsigned char *send = vt_alloc(all);
    unsigned char *recv = inplace ? send + (size_t)c->rank * len : vt_alloc(len);
    cc_fill(send, dt, c->rank, count * (size_t)c->n, salt);
    uint32_t salt2 = ++c->salt;
    void *ints = NULL, *ints_out = NULL;
    bool ok = true;
    if (in_group) {
        ints = vt_alloc(CC_SMALL * 4 * (size_t)c->n);
        ints_out = vt_alloc(CC_SMALL * 4);
        vt_fill_input(ints, ncclInt32, ncclSum, c->rank, c->n, 0, CC_SMALL * (size_t)c->n,
                      salt2);
        ok &= vt_rc(what, ncclGroupStart(), ncclSuccess);
    }
    ok &= cc_rc(c, what, ncclReduceScatter(send, recv, count, dt, op, c->comm, VT_STREAM));
    if (in_group) {
        ok &= vt_rc(what, ncclReduceScatter(ints, ints_out, CC_SMALL, ncclInt32, ncclSum,
                                            c->comm, VT_STREAM), ncclSuccess);
        ok &= vt_rc(what, ncclGroupEnd(), ncclSuccess);
    }
    if (ok) {
        cc_tally_t t = {.finite = true};
        for (size_t i = 0; i < count; i++) {
            double want, bound, exact;
            cc_rs_expect(c, kind, dt, op, count, i, salt, &want, &bound, &exact);
            cc_tally(&t, i, vt_load(dt, recv, i).f, want, bound, exact);
        }
        cc_report(what, &t, kind, dt);
        if (!inplace)
            vt_check_sentinel(what, recv, len, len + VT_GUARD);
        if (in_group)
            vt_check_reduced(what, ints_out, ncclInt32, ncclSum, c->n,
                             (size_t)c->rank * CC_SMALL, CC_SMALL, salt2);
        if (hash_p)
            *hash_p = cc_hash(recv, len);
    }
    free(ints_out);
    free(ints);
    if (!inplace)
        free(recv);
    free(send);
}

/* A reduce-scatter the setting leaves alone, with the reference's
 * inputs: int32 sums, float32 maxima. */
static void cc_reduce_scatter_ref(cc_t *c, ncclDataType_t dt, ncclRedOp_t op, size_t count)
{
    uint32_t salt = ++c->salt;
    size_t all = count * (size_t)c->n;
    char what[160];
    snprintf(what, sizeof(what), "ncclReduceScatter %s %s count %zu x %d ranks (exact)",
             vt_dtype_name(dt), vt_op_name(op), count, c->n);
    void *send = vt_alloc(all * vt_size(dt)), *recv = vt_alloc(count * vt_size(dt));
    vt_fill_input(send, dt, op, c->rank, c->n, 0, all, salt);
    if (vt_rc(what, ncclReduceScatter(send, recv, count, dt, op, c->comm, VT_STREAM),
              ncclSuccess))
        vt_check_reduced(what, recv, dt, op, c->n, (size_t)c->rank * count, count, salt);
    free(recv);
    free(send);
}

/* ---- the case ----------------------------------------------------------------- */

/* A call repeated with the same inputs gives the same bits. */
static void cc_repeat(const char *what, uint64_t first, uint64_t again)
{
    if (first != again)
        vt_fail("%s, repeated with the same inputs: different bits (the door kept state "
                "between calls)", what);
}

/* A non-blocking communicator: its compressed calls (which complete
 * before they return) and plain ones (which may still be in progress)
 * alike come back as they should once it reports completion. */
static void cc_nonblocking(cc_t *c, const ncclUniqueId *id)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nb = NULL;
    const char *what = "ncclCommInitRankConfig(blocking 0)";
    if (!vt_rc2(what, ncclCommInitRankConfig(&nb, c->n, *id, c->rank, &cfg), ncclSuccess,
                ncclInProgress) || !nb)
        return;
    if (!vt_rc(what, vt_wait_comm(nb, what), ncclSuccess))
        return;
    ncclComm_t main_comm = c->comm;
    c->comm = nb;
    c->nonblocking = true;
    cc_allgather(c, ncclFloat32, CC_BIG, false, false, ++c->salt, NULL);
    cc_reduce_scatter(c, ncclFloat32, ncclSum, CC_BIG, false, false, ++c->salt, NULL);
    c->nonblocking = false;
    c->comm = main_comm;
    what = "ncclCommFinalize(non-blocking comm)";
    if (vt_rc2(what, ncclCommFinalize(nb), ncclSuccess, ncclInProgress))
        vt_rc(what, vt_wait_comm(nb, what), ncclSuccess);
    VT_RC(ncclCommDestroy(nb), ncclSuccess);
}

int vt_compress_colls_rank(int rank, int nranks, const vt_ids_t *ids)
{
    cc_t c = {.rank = rank, .n = nranks, .ag = cc_kind("SHOAL_COMPRESS_ALLGATHER", false),
              .rs = cc_kind("SHOAL_COMPRESS_REDUCESCATTER", true),
              .min_bytes = cc_min_bytes()};
    if (!VT_RC(ncclCommInitRank(&c.comm, nranks, ids->id[VT_ID_MAIN], rank), ncclSuccess))
        return 1;
    /* The threshold in float32 values per rank: at it, and one below. */
    size_t per = (size_t)nranks * 4, at = (c.min_bytes + per - 1) / per;
    uint64_t h1 = 0, h2 = 0;
    uint32_t salt;

    salt = ++c.salt;
    cc_allgather(&c, ncclFloat32, CC_BIG, false, false, salt, &h1);
    cc_allgather(&c, ncclFloat32, CC_BIG, false, false, salt, &h2);
    cc_repeat("ncclAllGather float32", h1, h2);
    cc_allgather(&c, ncclFloat32, CC_BIG, true, false, ++c.salt, NULL);
    cc_allgather(&c, ncclBfloat16, CC_BIG, false, false, ++c.salt, NULL);
    cc_allgather(&c, ncclFloat16, CC_BIG, true, false, ++c.salt, NULL);
    if (at > 1 && at <= CC_BIG) {
        cc_allgather(&c, ncclFloat32, at, false, false, ++c.salt, NULL);
        cc_allgather(&c, ncclFloat32, at - 1, false, false, ++c.salt, NULL);
    }
    cc_allgather(&c, ncclFloat32, CC_SMALL, false, false, ++c.salt, NULL);
    cc_allgather_int32(&c);
    cc_allgather(&c, ncclFloat32, CC_GROUP, false, true, ++c.salt, NULL);

    salt = ++c.salt;
    cc_reduce_scatter(&c, ncclFloat32, ncclSum, CC_BIG, false, false, salt, &h1);
    cc_reduce_scatter(&c, ncclFloat32, ncclSum, CC_BIG, false, false, salt, &h2);
    cc_repeat("ncclReduceScatter float32 sum", h1, h2);
    cc_reduce_scatter(&c, ncclFloat32, ncclAvg, CC_BIG, false, false, ++c.salt, NULL);
    cc_reduce_scatter(&c, ncclFloat32, ncclSum, CC_BIG, true, false, ++c.salt, NULL);
    cc_reduce_scatter(&c, ncclBfloat16, ncclSum, CC_BIG, false, false, ++c.salt, NULL);
    cc_reduce_scatter(&c, ncclFloat16, ncclAvg, CC_BIG, true, false, ++c.salt, NULL);
    if (at > 1 && at <= CC_BIG) {
        cc_reduce_scatter(&c, ncclFloat32, ncclSum, at, false, false, ++c.salt, NULL);
        cc_reduce_scatter(&c, ncclFloat32, ncclSum, at - 1, false, false, ++c.salt, NULL);
    }
    cc_reduce_scatter(&c, ncclFloat32, ncclSum, CC_SMALL, false, false, ++c.salt, NULL);
    cc_reduce_scatter_ref(&c, ncclInt32, ncclSum, CC_INT32);
    cc_reduce_scatter_ref(&c, ncclFloat32, ncclMax, CC_MAX);
    cc_reduce_scatter(&c, ncclFloat32, ncclSum, CC_GROUP, false, true, ++c.salt, NULL);

    cc_nonblocking(&c, &ids->id[VT_ID_CONFIG]);
    VT_RC(ncclCommDestroy(c.comm), ncclSuccess);
    return 0;
}
