/* allreduce_bench --compress: settings, PowerSGD's layout, inputs, and one
 * row of timed and checked compressed all-reduces (bench_compress.h), of
 * host buffers or, with --mem device, of device buffers through the
 * stream-ordered call.
 *
 * The plain rows' inputs are small integers, chosen so that every sum is
 * exact; a block of them holds nearly equal values, which no compressor
 * finds hard. The compressed rows take values spread over [-1, 1) instead,
 * from a hash of the rank and the index, as gradients would be: every rank
 * can still compute every other rank's input, and so the exact sum. */
#include "bench_compress.h"

#include "bench_coll.h"
#include "bench_mem.h"

#include "base/dtype.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_COMP_GUARD_BYTE 0xa5
#define BENCH_COMP_POISON_BYTE 0xcd
#define BENCH_COMP_OPTS_MAX 256

static const char *const bench_comp_kinds[] = {
    [SHOAL_COMPRESS_INT8] = "int8",
    [SHOAL_COMPRESS_TERNARY] = "ternary",
    [SHOAL_COMPRESS_POWERSGD] = "powersgd",
    [SHOAL_COMPRESS_SIGN] = "sign",
    [SHOAL_COMPRESS_MAJORITY] = "majority",
    [SHOAL_COMPRESS_INT4] = "int4",
};
#define BENCH_COMP_NKINDS (sizeof(bench_comp_kinds) / sizeof(bench_comp_kinds[0]))

static const char *const bench_comp_algos[] = {
    [SHOAL_COMPRESS_ALGO_AUTO] = "auto",
    [SHOAL_COMPRESS_ALGO_RING] = "ring",
    [SHOAL_COMPRESS_ALGO_TWO_SHOT] = "two-shot",
    [SHOAL_COMPRESS_ALGO_TREE] = "tree",
};
#define BENCH_COMP_NALGOS (sizeof(bench_comp_algos) / sizeof(bench_comp_algos[0]))

const char *shoal_bench_comp_kind_name(shoal_compress_kind_t kind)
{
    return (size_t)kind < BENCH_COMP_NKINDS && bench_comp_kinds[kind] ? bench_comp_kinds[kind]
                                                                      : "?";
}

/* ---- Settings ------------------------------------------------------------ */

/* An unsigned decimal in min..max; -1 after saying why. */
static int bench_comp_uint(const char *what, const char *text, unsigned long long min,
                           unsigned long long max, unsigned long long *out_p)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || *end || errno || text[0] == '-' || text[0] == '+' || v < min ||
        v > max) {
        fprintf(stderr, "allreduce_bench: %s wants an integer in %llu..%llu, not \"%s\"\n", what,
                min, max, text);
        return -1;
    }
    *out_p = v;
    return 0;
}

/* Refuses an item of --compress-opts that the kind does not use. */
static int bench_comp_for(const shoal_bench_comp_t *c, const char *item, unsigned kinds)
{
    if (kinds & (1u << c->opt.kind))
        return 0;
    fprintf(stderr, "allreduce_bench: --compress-opts %s does not apply to %s\n", item,
            shoal_bench_comp_kind_name(c->opt.kind));
    return -1;
}

#define KIND_BIT(k) (1u << SHOAL_COMPRESS_##k)

/* One item of --compress-opts. */
static int bench_comp_item(shoal_bench_comp_t *c, const char *item)
{
    shoal_compress_options_t *o = &c->opt;
    const char *eq = strchr(item, '=');
    size_t klen = eq ? (size_t)(eq - item) : strlen(item);
    const char *val = eq ? eq + 1 : NULL;
    unsigned long long v;
#define KEY_IS(name) (klen == strlen(name) && !strncmp(item, name, klen))
    if (!val && (KEY_IS("ef") || KEY_IS("noef"))) {
        o->error_feedback = KEY_IS("ef");
        return 0;
    }
    if (!val && (KEY_IS("stochastic") || KEY_IS("nearest"))) {
        if (bench_comp_for(c, item, KIND_BIT(INT8)))
            return -1;
        o->stochastic = KEY_IS("stochastic");
        return 0;
    }
    if (val && KEY_IS("block")) {
        if (bench_comp_for(c, item, KIND_BIT(INT8) | KIND_BIT(TERNARY)) ||
            bench_comp_uint("--compress-opts block", val, 32, 128, &v))
            return -1;
        if (v != 32 && v != 64 && v != 128) {
            fprintf(stderr, "allreduce_bench: --compress-opts block is 32, 64 or 128, not %llu\n",
                    v);
            return -1;
        }
        o->block = (unsigned)v;
        return 0;
    }
    if (val && KEY_IS("clip")) {
        char *end;
        errno = 0;
        double d = strtod(val, &end);
        if (bench_comp_for(c, item, KIND_BIT(TERNARY)))
            return -1;
        if (end == val || *end || errno || !isfinite(d) || d < 0 || d > 1e6) {
            fprintf(stderr, "allreduce_bench: --compress-opts clip wants a number of standard "
                    "deviations >= 0 (0: no clipping), not \"%s\"\n", val);
            return -1;
        }
        o->clip_sigma = (float)d;
        return 0;
    }
    if (val && KEY_IS("rank")) {
        if (bench_comp_for(c, item, KIND_BIT(POWERSGD)) ||
            bench_comp_uint("--compress-opts rank", val, 1, 65536, &v))
            return -1;
        o->rank = (unsigned)v;
        return 0;
    }
    if (val && KEY_IS("warmup")) {
        if (bench_comp_for(c, item, KIND_BIT(POWERSGD)) ||
            bench_comp_uint("--compress-opts warmup", val, 0, 1000000000, &v))
            return -1;
        o->warmup_steps = (unsigned)v;
        return 0;
    }
    if (val && KEY_IS("seed")) {
        if (bench_comp_uint("--compress-opts seed", val, 0, UINT64_MAX, &v))
            return -1;
        o->seed = v;
        return 0;
    }
    if (val && KEY_IS("algo")) {
        if (bench_comp_for(c, item, KIND_BIT(INT8) | KIND_BIT(TERNARY)))
            return -1;
        for (size_t a = 0; a < BENCH_COMP_NALGOS; a++) {
            if (!strcmp(val, bench_comp_algos[a])) {
                o->algo = (shoal_compress_algo_t)a;
                return 0;
            }
        }
        fprintf(stderr, "allreduce_bench: --compress-opts algo is auto, ring, two-shot or tree, "
                "not \"%s\"\n", val);
        return -1;
    }
#undef KEY_IS
    fprintf(stderr, "allreduce_bench: unknown --compress-opts item \"%s\" (block=N, stochastic, "
            "nearest, ef, noef, clip=SIGMA, rank=N, warmup=N, seed=N, "
            "algo=auto|ring|two-shot|tree)\n", item);
    return -1;
}

static int bench_comp_shape(shoal_bench_comp_t *c, const char *shape)
{
    if (c->opt.kind != SHOAL_COMPRESS_POWERSGD) {
        fprintf(stderr, "allreduce_bench: --shape is PowerSGD's matrix: it needs "
                "--compress powersgd, not %s\n", shoal_bench_comp_kind_name(c->opt.kind));
        return -1;
    }
    const char *x = strchr(shape, 'x');
    char rows[32];
    unsigned long long r, col;
    if (!x || (size_t)(x - shape) >= sizeof(rows)) {
        fprintf(stderr, "allreduce_bench: --shape wants ROWSxCOLS (e.g. 4096x4096), not \"%s\"\n",
                shape);
        return -1;
    }
    memcpy(rows, shape, (size_t)(x - shape));
    rows[x - shape] = '\0';
    if (bench_comp_uint("--shape's rows", rows, 1, UINT32_MAX, &r) ||
        bench_comp_uint("--shape's columns", x + 1, 1, UINT32_MAX, &col))
        return -1;
    c->shape_rows = (size_t)r;
    c->shape_cols = (size_t)col;
    return 0;
}

int shoal_bench_comp_setup(shoal_bench_comp_t *c, const char *kind, const char *opts,
                           const char *shape)
{
    memset(c, 0, sizeof(*c));
    if (!kind) {
        if (!opts && !shape)
            return 0;
        fprintf(stderr, "allreduce_bench: %s needs --compress\n",
                opts ? "--compress-opts" : "--shape");
        return -1;
    }
    const char *colon = strchr(kind, ':');
    size_t len = colon ? (size_t)(colon - kind) : strlen(kind);
    shoal_compress_kind_t k = 0;
    for (size_t i = 0; i < BENCH_COMP_NKINDS; i++)
        if (bench_comp_kinds[i] && strlen(bench_comp_kinds[i]) == len &&
            !strncmp(kind, bench_comp_kinds[i], len))
            k = (shoal_compress_kind_t)i;
    if (!k || shoal_compress_options_init(&c->opt, k) != SHOAL_OK) {
        fprintf(stderr, "allreduce_bench: unknown --compress kind \"%s\" (int8, ternary, "
                "powersgd, powersgd:RANK)\n", kind);
        return -1;
    }
    if (colon) {
        unsigned long long v;
        if (k != SHOAL_COMPRESS_POWERSGD) {
            fprintf(stderr, "allreduce_bench: --compress %s: only powersgd takes :RANK\n", kind);
            return -1;
        }
        if (bench_comp_uint("--compress powersgd:RANK", colon + 1, 1, 65536, &v))
            return -1;
        c->opt.rank = (unsigned)v;
    }
    if (opts) {
        char buf[BENCH_COMP_OPTS_MAX];
        if (strlen(opts) >= sizeof(buf)) {
            fprintf(stderr, "allreduce_bench: --compress-opts is longer than %d characters\n",
                    BENCH_COMP_OPTS_MAX - 1);
            return -1;
        }
        strcpy(buf, opts);
        for (char *save, *item = strtok_r(buf, ",", &save); item;
             item = strtok_r(NULL, ",", &save))
            if (bench_comp_item(c, item))
                return -1;
    }
    if (shape && bench_comp_shape(c, shape))
        return -1;
    c->on = 1;
    return 0;
}

/* The rows time shoal_allreduce_compressed_stream, which takes every
 * kind (shoal.h). */
int shoal_bench_comp_on_device(shoal_bench_comp_t *c, int blocking)
{
    c->device = 1;
    c->blocking = blocking;
    return 0;
}

void shoal_bench_comp_describe(const shoal_bench_comp_t *c, char *out, size_t len)
{
    const shoal_compress_options_t *o = &c->opt;
    int n = 0;
    switch (o->kind) {
    case SHOAL_COMPRESS_INT8:
    case SHOAL_COMPRESS_INT4:
    case SHOAL_COMPRESS_SIGN:
        n = snprintf(out, len, "%s, block %u, %s rounding, algo %s",
                     bench_comp_kinds[o->kind], o->block,
                     o->stochastic ? "stochastic" : "nearest", bench_comp_algos[o->algo]);
        break;
    case SHOAL_COMPRESS_MAJORITY:
        n = snprintf(out, len, "majority vote of signs, exact integer sums on the ring");
        break;
    case SHOAL_COMPRESS_TERNARY:
        n = snprintf(out, len, "ternary, block %u, clip %g sigma, algo %s", o->block,
                     (double)o->clip_sigma, bench_comp_algos[o->algo]);
        break;
    case SHOAL_COMPRESS_POWERSGD:
        if (c->shape_rows)
            n = snprintf(out, len, "powersgd, rank %u, warm-up %u, matrix %zux%zu", o->rank,
                         o->warmup_steps, c->shape_rows, c->shape_cols);
        else
            n = snprintf(out, len, "powersgd, rank %u, warm-up %u, the squarest matrix of "
                         "each size", o->rank, o->warmup_steps);
        break;
    }
    if (n >= 0 && (size_t)n < len)
        n += snprintf(out + n, len - (size_t)n, ", error feedback %s, seed %llu",
                      o->error_feedback ? "on" : "off", (unsigned long long)o->seed);
    /* The stream form picks its own schedule (shoal.h): say which. */
    if (c->device && n >= 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, "; device memory: "
                 "shoal_allreduce_compressed_stream on each rank's stream (%s, whatever algo)",
                 o->kind == SHOAL_COMPRESS_INT8      ? "two-shot"
                 : o->kind == SHOAL_COMPRESS_TERNARY ? "the codes summed exactly"
                                                     : "the products through cuBLAS");
}

void shoal_bench_comp_json(FILE *f, const shoal_bench_comp_t *c)
{
    const shoal_compress_options_t *o = &c->opt;
    fprintf(f, "  \"compression\": {\"kind\": \"%s\", \"error_feedback\": %s, \"block\": %u, "
            "\"stochastic\": %s, \"clip_sigma\": %g, \"rank\": %u, \"warmup_steps\": %u, "
            "\"seed\": %llu, \"algo\": \"%s\", ", shoal_bench_comp_kind_name(o->kind),
            o->error_feedback ? "true" : "false", o->block, o->stochastic ? "true" : "false",
            (double)o->clip_sigma, o->rank, o->warmup_steps, (unsigned long long)o->seed,
            bench_comp_algos[o->algo]);
    if (c->shape_rows)
        fprintf(f, "\"shape\": \"%zux%zu\"},\n", c->shape_rows, c->shape_cols);
    else
        fprintf(f, "\"shape\": null},\n");
}

int shoal_bench_comp_layout(const shoal_bench_comp_t *c, size_t count, size_t *rows_p,
                            size_t *cols_p)
{
    if (c->shape_rows) {
        if (c->shape_cols > count / c->shape_rows || c->shape_rows * c->shape_cols != count)
            return -1;
        *rows_p = c->shape_rows;
        *cols_p = c->shape_cols;
        return 0;
    }
    if (count == 0) {
        *rows_p = *cols_p = 0;
        return 0;
    }
    size_t r = (size_t)sqrt((double)count);
    while (r > 1 && r * r > count)
        r--;
    while ((r + 1) * (r + 1) <= count)
        r++;
    while (count % r)
        r--;
    *rows_p = r;
    *cols_p = count / r;
    return 0;
}

/* ---- Inputs and the exact sum ------------------------------------------------ */

static double bench_comp_get(const unsigned char *buf, size_t i, shoal_dtype_t dtype)
{
    uint16_t h;
    float f;
    switch (dtype) {
    case SHOAL_FLOAT32:
        memcpy(&f, buf + i * sizeof(f), sizeof(f));
        return f;
    case SHOAL_FLOAT16:
        memcpy(&h, buf + i * sizeof(h), sizeof(h));
        return shoal_f16_to_f32(h);
    case SHOAL_BFLOAT16:
        memcpy(&h, buf + i * sizeof(h), sizeof(h));
        return shoal_bf16_to_f32(h);
    default:
        return 0;
    }
}

/* Rank r's value at index i before rounding to the dtype: splitmix64 of
 * the pair, spread over [-1, 1). */
static double bench_comp_raw(int r, size_t i)
{
    uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull + ((uint64_t)r + 1) * 0xd1b54a32d192ed03ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-52 - 1.0;
}

/* The value as the buffer holds it. */
static double bench_comp_value(shoal_dtype_t dtype, int r, size_t i)
{
    unsigned char e[8];
    shoal_dtype_set_f64(e, 0, dtype, bench_comp_raw(r, i));
    return bench_comp_get(e, 0, dtype);
}

static void bench_comp_fill(const shoal_bench_comp_row_t *row, unsigned char *buf)
{
    for (size_t i = 0; i < row->count; i++)
        shoal_dtype_set_f64(buf, i, row->dtype, bench_comp_raw(row->rank, i));
}

/* Elements of the send buffer that are no longer this rank's input. */
static long long bench_comp_send_changed(const shoal_bench_comp_row_t *row)
{
    size_t es = shoal_dtype_bytes(row->dtype);
    long long changed = 0;
    unsigned char e[8];
    for (size_t i = 0; i < row->count; i++) {
        shoal_dtype_set_f64(e, 0, row->dtype, bench_comp_raw(row->rank, i));
        changed += memcmp(row->send + i * es, e, es) != 0;
    }
    return changed;
}

/* ||got - exact|| / ||exact||, the exact sum (or average) in double from
 * every rank's input; a result that is not a number counts as infinite. */
static double bench_comp_rel_error(const shoal_bench_comp_row_t *row, const unsigned char *got)
{
    double e2 = 0, x2 = 0;
    for (size_t i = 0; i < row->count; i++) {
        double exact = 0;
        for (int r = 0; r < row->nranks; r++)
            exact += bench_comp_value(row->dtype, r, i);
        if (row->op == SHOAL_AVG)
            exact /= row->nranks;
        double d = bench_comp_get(got, i, row->dtype) - exact;
        e2 += d * d;
        x2 += exact * exact;
    }
    double rel = x2 > 0 ? sqrt(e2 / x2) : e2 > 0 ? INFINITY : 0;
    return rel >= 0 ? rel : INFINITY;
}

/* FNV-1a of the result, to see that every rank got the same. */
static uint64_t bench_comp_hash(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* ---- Timing and checking ----------------------------------------------------- */

/* Where a row's calls go. The host fills and reads row->send and
 * row->recv: the row's own buffers, which shoal takes too; or with --mem
 * device the rank's host mirrors, copied to and from the device buffers
 * (send, recv) that the stream-ordered calls take on the rank's stream. */
typedef struct {
    const shoal_bench_comp_row_t *row; /* the buffers as the host sees them */
    shoal_bench_bufs_t *bufs;          /* --mem device; NULL for host memory */
    const void *send;                  /* the buffers shoal gets */
    void *recv;
    int blocking;                      /* --mem device: -z */
    const char *call_name;
} bench_comp_run_t;

static double bench_comp_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static shoal_status_t bench_comp_fail(const shoal_bench_comp_row_t *row, const char *what,
                                      shoal_status_t s)
{
    fprintf(stderr, "# rank %d: %s: %s (%s)\n", row->rank, what, shoal_status_string(s),
            shoal_comm_last_error(row->comm));
    return s;
}

/* --mem device: bytes [off, off + len) of the send (recv 0) or receive
 * (recv 1) mirror onto the device, or back, waiting for the copy. Nothing
 * to do for host memory, where the mirrors are the buffers. */
static shoal_status_t bench_comp_to_dev(const bench_comp_run_t *run, int recv, size_t off,
                                        size_t len)
{
    return run->bufs ? shoal_bench_to_dev(run->bufs, run->row->rank, recv, off, len) : SHOAL_OK;
}

static shoal_status_t bench_comp_from_dev(const bench_comp_run_t *run, int recv, size_t off,
                                          size_t len)
{
    return run->bufs ? shoal_bench_from_dev(run->bufs, run->row->rank, recv, off, len)
                     : SHOAL_OK;
}

/* --mem device: waits for the stream and returns the error of the work
 * the calls queued there (said on stderr). Host calls are done when they
 * return. */
static shoal_status_t bench_comp_sync(const bench_comp_run_t *run, const char *what)
{
    return run->bufs ? shoal_bench_sync(run->row->comm, run->row->rank, run->bufs, what)
                     : SHOAL_OK;
}

/* The receive buffer before a call: poison, so that a result never
 * written shows; in place, this rank's input; then the guard. */
static void bench_comp_prepare(const shoal_bench_comp_row_t *row, int in_place)
{
    size_t bytes = row->count * shoal_dtype_bytes(row->dtype);
    memset(row->recv, BENCH_COMP_POISON_BYTE, bytes);
    if (in_place)
        bench_comp_fill(row, row->recv);
    memset(row->recv + bytes, BENCH_COMP_GUARD_BYTE, row->guard);
}

static long long bench_comp_guard_check(const shoal_bench_comp_row_t *row)
{
    const unsigned char *g = row->recv + row->count * shoal_dtype_bytes(row->dtype);
    long long bad = 0;
    for (size_t i = 0; i < row->guard; i++)
        bad += g[i] != BENCH_COMP_GUARD_BYTE;
    return bad;
}

/* One call; with --mem device only queued on the stream, its info written
 * once the stream has passed it. */
static shoal_status_t bench_comp_call(shoal_compressor_t comp, const bench_comp_run_t *run,
                                      int in_place, shoal_compress_info_t *info)
{
    const void *src = in_place ? run->recv : run->send;
    if (run->bufs)
        return shoal_allreduce_compressed_stream(comp, src, run->recv, run->row->op, info,
                                                 run->bufs->stream);
    return shoal_allreduce_compressed(comp, src, run->recv, run->row->op, info);
}

/* Whether every rank holds bitwise the same result: the largest and the
 * smallest hash over the ranks. */
static shoal_status_t bench_comp_agree(const shoal_bench_comp_row_t *row, int *same_p)
{
    uint64_t h = bench_comp_hash(row->recv, row->count * shoal_dtype_bytes(row->dtype));
    uint64_t both[2] = {h, ~h};
    shoal_status_t s = shoal_allreduce(both, both, 2, SHOAL_UINT64, SHOAL_MAX, row->comm);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, "shoal_allreduce (result hashes)", s);
    *same_p = both[0] == ~both[1];
    return SHOAL_OK;
}

/* Warm-up, then the mean time of one call over the timed ones. With --mem
 * device the calls only queue their work, so the clock is read after the
 * stream has run it, as for the plain rows (allreduce_bench.c's
 * shoal_bench_time): waiting after each call with -z 1, once after the
 * loop with -z 0. */
static shoal_status_t bench_comp_time(shoal_compressor_t comp, const bench_comp_run_t *run,
                                      int in_place, shoal_bench_comp_result_t *res,
                                      shoal_compress_info_t *info)
{
    const shoal_bench_comp_row_t *row = run->row;
    char what[96];
    shoal_status_t s;
    snprintf(what, sizeof(what), "%s (warm-up)", run->call_name);
    for (int w = 0; w < row->warmup; w++) {
        s = bench_comp_call(comp, run, in_place, info);
        if (s != SHOAL_OK)
            return bench_comp_fail(row, what, s);
    }
    s = bench_comp_sync(run, what);
    if (s != SHOAL_OK)
        return s;
    int32_t one = 1;
    s = shoal_allreduce(&one, &one, 1, SHOAL_INT32, SHOAL_SUM, row->comm);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, "barrier", s);
    double t0 = bench_comp_now_s();
    for (int it = 0; it < row->iters; it++) {
        s = bench_comp_call(comp, run, in_place, info);
        if (s != SHOAL_OK)
            return bench_comp_fail(row, run->call_name, s);
        if (run->blocking && (s = bench_comp_sync(run, run->call_name)) != SHOAL_OK)
            return s;
    }
    if (!run->blocking && (s = bench_comp_sync(run, run->call_name)) != SHOAL_OK)
        return s;
    res->us[in_place] = (bench_comp_now_s() - t0) * 1e6 / (double)row->iters;
    return SHOAL_OK;
}

/* One placement: warm-up, the timed calls, then with check one call on
 * fresh inputs whose result is measured. The compressor is reset before
 * that call: what the timed calls left (error feedback's residuals,
 * PowerSGD's warm start) would otherwise enter the result, so that its
 * error would depend on -n and -w; measured from a fresh state it is the
 * error of one call (with PowerSGD's warmup=N, a plain all-reduce). With
 * --mem device the receive buffer's poison, input and guard go onto the
 * device before the calls, and the guard, the result and the send buffer
 * come back before they are looked at. */
static shoal_status_t bench_comp_placement(shoal_compressor_t comp, const bench_comp_run_t *run,
                                           int in_place, shoal_bench_comp_result_t *res,
                                           shoal_compress_info_t *info)
{
    const shoal_bench_comp_row_t *row = run->row;
    size_t bytes = row->count * shoal_dtype_bytes(row->dtype);
    bench_comp_prepare(row, in_place);
    shoal_status_t s = bench_comp_to_dev(run, 1, 0, bytes + row->guard);
    if (s == SHOAL_OK)
        s = bench_comp_time(comp, run, in_place, res, info);
    if (s == SHOAL_OK)
        s = bench_comp_from_dev(run, 1, bytes, row->guard);
    if (s != SHOAL_OK)
        return s;
    res->out_of_bounds += bench_comp_guard_check(row);
    if (!row->check)
        return SHOAL_OK;

    bench_comp_prepare(row, in_place);
    s = bench_comp_to_dev(run, 1, 0, bytes + row->guard);
    if (s != SHOAL_OK)
        return s;
    s = shoal_compressor_reset(comp);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, "shoal_compressor_reset", s);
    char what[96];
    snprintf(what, sizeof(what), "%s (check)", run->call_name);
    s = bench_comp_call(comp, run, in_place, info);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, what, s);
    s = bench_comp_sync(run, what);
    if (s == SHOAL_OK)
        s = bench_comp_from_dev(run, 1, 0, bytes + row->guard);
    if (s == SHOAL_OK && !in_place)
        s = bench_comp_from_dev(run, 0, 0, bytes);
    if (s != SHOAL_OK)
        return s;
    res->out_of_bounds += bench_comp_guard_check(row);
    res->rel_error[in_place] = bench_comp_rel_error(row, row->recv);
    if (!in_place)
        res->wrong += bench_comp_send_changed(row);
    int same = 1;
    s = bench_comp_agree(row, &same);
    if (s != SHOAL_OK)
        return s;
    if (!same && row->rank == 0) {
        fprintf(stderr, "# %zu %s values (%s): the ranks' results differ\n", row->count,
                shoal_dtype_name(row->dtype), in_place ? "in place" : "out of place");
        res->wrong++;
    }
    return SHOAL_OK;
}

/* The row's calls: on its own buffers, or with the settings' device on
 * the rank's device buffers, the host working on their mirrors. */
static int bench_comp_run_init(const shoal_bench_comp_t *c, const shoal_bench_comp_row_t *row,
                               shoal_bench_comp_row_t *host, bench_comp_run_t *run)
{
    *run = (bench_comp_run_t){row, NULL, row->send, row->recv, 0, "shoal_allreduce_compressed"};
    if (!c->device)
        return 0;
    shoal_bench_bufs_t *b = shoal_bench_bufs_of(row->recv);
    if (!b || !b->dev || b->send != row->send) {
        fprintf(stderr, "# rank %d: --compress with --mem device: the row's buffers are not "
                "the rank's device buffers\n", row->rank);
        return -1;
    }
    *host = *row;
    host->send = b->hsend;
    host->recv = b->hrecv;
    run->row = host;
    run->bufs = b;
    run->blocking = c->blocking;
    run->call_name = "shoal_allreduce_compressed_stream";
    return 0;
}

shoal_status_t shoal_bench_comp_row(const shoal_bench_comp_t *c, const shoal_bench_comp_row_t *row,
                                    shoal_bench_comp_result_t *res_p)
{
    shoal_bench_comp_result_t res;
    memset(&res, 0, sizeof(res));
    res.rel_error[0] = res.rel_error[1] = -1;
    shoal_bench_comp_row_t host;
    bench_comp_run_t run;
    if (bench_comp_run_init(c, row, &host, &run) != 0)
        return SHOAL_ERR_INVALID_ARG;
    shoal_compress_layout_t layout = {0, NULL, NULL};
    const shoal_compress_layout_t *lp = NULL;
    if (c->opt.kind == SHOAL_COMPRESS_POWERSGD) {
        if (shoal_bench_comp_layout(c, row->count, &res.rows, &res.cols) != 0) {
            if (row->rank == 0)
                fprintf(stderr, "allreduce_bench: --shape %zux%zu is not the %zu elements of "
                        "this row (%zu bytes of %s)\n", c->shape_rows, c->shape_cols,
                        row->count, row->count * shoal_dtype_bytes(row->dtype),
                        shoal_dtype_name(row->dtype));
            return SHOAL_ERR_INVALID_ARG;
        }
        if (row->count) {
            layout = (shoal_compress_layout_t){1, &res.rows, &res.cols};
            lp = &layout;
        }
    }
    shoal_compressor_t comp;
    shoal_status_t s = shoal_compressor_create(row->comm, &c->opt, row->count, row->dtype, lp,
                                               &comp);
    if (s != SHOAL_OK)
        return bench_comp_fail(row, "shoal_compressor_create", s);
    bench_comp_fill(run.row, run.row->send);
    s = bench_comp_to_dev(&run, 0, 0, row->count * shoal_dtype_bytes(row->dtype));
    /* With --mem device, info is the last call's once its stream has
     * passed it: every placement ends waiting for the stream. */
    shoal_compress_info_t info;
    memset(&info, 0, sizeof(info));
    for (int in_place = 0; in_place < 2 && s == SHOAL_OK; in_place++)
        s = bench_comp_placement(comp, &run, in_place, &res, &info);
    if (s != SHOAL_OK)
        goto out_destroy;

    /* Like the plain rows: a call lasts as long as its slowest rank. */
    double worst[4] = {res.us[0], res.us[1], res.rel_error[0], res.rel_error[1]};
    long long counts[2] = {res.wrong, res.out_of_bounds};
    uint64_t wire[2] = {info.bytes_sent, info.bytes_received};
    double ratio = info.ratio;
    s = shoal_allreduce(worst, worst, 4, SHOAL_FLOAT64, SHOAL_MAX, row->comm);
    if (s == SHOAL_OK)
        s = shoal_allreduce(counts, counts, 2, SHOAL_INT64, SHOAL_SUM, row->comm);
    if (s == SHOAL_OK)
        s = shoal_allreduce(wire, wire, 2, SHOAL_UINT64, SHOAL_MAX, row->comm);
    if (s == SHOAL_OK)
        s = shoal_allreduce(&ratio, &ratio, 1, SHOAL_FLOAT64, SHOAL_MIN, row->comm);
    if (s != SHOAL_OK) {
        bench_comp_fail(row, "shoal_allreduce (results)", s);
        goto out_destroy;
    }
    res.us[0] = worst[0];
    res.us[1] = worst[1];
    res.rel_error[0] = worst[2];
    res.rel_error[1] = worst[3];
    res.wrong = counts[0];
    res.out_of_bounds = counts[1];
    res.bytes_sent = wire[0];
    res.bytes_received = wire[1];
    res.ratio = ratio;
    *res_p = res;
out_destroy:
    shoal_compressor_destroy(comp);
    return s;
}
