/* The compressor API (shoal.h: shoal_compressor_*, shoal_allreduce_compressed,
 * shoal_allreduce_int8) over shared memory and tcp, 1..8 ranks:
 * - every kind (int8 nearest and stochastic, over the ring, the two-shot
 *   and the tree; ternary with and without clipping; PowerSGD on a bucket
 *   of matrices and vectors; sign, both roundings, on the two-shot; int4 on
 *   the two-shot and the ring) gives every rank bitwise the same result at
 *   every step;
 * - error feedback: after K steps the residuals summed over the ranks are
 *   the exact sum of every step's inputs minus the sum of the results (the
 *   telescoping identity of error feedback), up to fp32 rounding;
 * - error feedback fused into the codecs' and PowerSGD's passes gives, at
 *   every step, bitwise the result of a twin compressor without error
 *   feedback fed the input plus the residual summed beforehand (the
 *   unfused path);
 * - int8 is within its error of the exact sum, PowerSGD's vectors are exact;
 * - checkpoints: the state saved after step 1 and set into a new compressor
 *   replays the later steps bit for bit; a state of the wrong size or of
 *   other options is refused and changes nothing; reset equals new;
 * - the non-blocking call gives what the blocking one does;
 * - info counts bytes and gives int8 and ternary ratios above 3;
 * - ternary's shared scales are bf16, rounded up from the largest value of
 *   each block over the ranks: every result is a whole multiple of one;
 * - float16 and bfloat16 buffers, AVG, count 0, the stateless int8 call,
 *   PowerSGD's warm-up of plain all-reduces;
 * - options that differ across ranks, or are invalid on one, fail create
 *   on every rank; bad calls are refused and the communicator stays usable;
 * - a compressed call against a plain one fails on both sides within the
 *   deadline and leaves the residuals as they were. */
#include "harness.h"

#include "api/compressor.h"
#include "base/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TEST_CHUNK 4096
#define STEPS 4

/* Rank r's input value i at step t: random signs, magnitudes that vary by
 * up to 2^8 from block to block. */
static float input(int r, size_t i, int t)
{
    uint32_t h = harness_mix((uint32_t)(r * 1000003 + t * 7919) ^ (uint32_t)i * 2654435761u);
    float mag = ldexpf(1.0f, (int)((i / 50) % 9) - 4);
    return ((float)(h >> 8) / 16777216.0f - 0.5f) * mag;
}

typedef struct {
    const char *name;
    shoal_compress_kind_t kind;
    int stochastic;
    float clip;
    shoal_compress_algo_t algo;
} variant_t;

static const variant_t variants[] = {
    {"int8 nearest", SHOAL_COMPRESS_INT8, 0, 0, SHOAL_COMPRESS_ALGO_AUTO},
    {"int8 stochastic", SHOAL_COMPRESS_INT8, 1, 0, SHOAL_COMPRESS_ALGO_RING},
    {"int8 two-shot", SHOAL_COMPRESS_INT8, 0, 0, SHOAL_COMPRESS_ALGO_TWO_SHOT},
    {"int8 tree", SHOAL_COMPRESS_INT8, 1, 0, SHOAL_COMPRESS_ALGO_TREE},
    {"ternary", SHOAL_COMPRESS_TERNARY, 1, 0, SHOAL_COMPRESS_ALGO_AUTO},
    {"ternary clipped", SHOAL_COMPRESS_TERNARY, 1, 2.5f, SHOAL_COMPRESS_ALGO_AUTO},
    {"powersgd", SHOAL_COMPRESS_POWERSGD, 0, 0, SHOAL_COMPRESS_ALGO_AUTO},
    {"sign", SHOAL_COMPRESS_SIGN, 0, 0, SHOAL_COMPRESS_ALGO_AUTO},
    {"sign stochastic", SHOAL_COMPRESS_SIGN, 1, 0, SHOAL_COMPRESS_ALGO_TWO_SHOT},
    {"int4", SHOAL_COMPRESS_INT4, 0, 0, SHOAL_COMPRESS_ALGO_AUTO},
    {"int4 ring", SHOAL_COMPRESS_INT4, 1, 0, SHOAL_COMPRESS_ALGO_RING},
};
#define NVARIANTS (sizeof(variants) / sizeof(variants[0]))

/* PowerSGD's bucket: matrices, vectors, and a matrix too small to shrink. */
static const size_t ps_rows[] = {37, 1, 64, 13, 3};
static const size_t ps_cols[] = {29, 13, 40, 1, 2};
#define PS_TENSORS 5
#define PS_COUNT (37 * 29 + 13 + 64 * 40 + 13 + 6)

static shoal_compressor_t make(shoal_comm_t comm, const variant_t *v, size_t count, int ef,
                               shoal_dtype_t dt)
{
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, v->kind);
    o.stochastic = v->stochastic;
    o.clip_sigma = v->clip;
    o.algo = v->algo;
    o.error_feedback = ef;
    o.rank = 3;
    o.seed = 7;
    shoal_compress_layout_t lay = {PS_TENSORS, ps_rows, ps_cols};
    shoal_compressor_t c = NULL;
    shoal_status_t s = shoal_compressor_create(
        comm, &o, count, dt, v->kind == SHOAL_COMPRESS_POWERSGD ? &lay : NULL, &c);
    return s == SHOAL_OK ? c : NULL;
}

/* One variant at one count: STEPS steps with error feedback, checked as in
 * the header; the state after step 1 replayed in a second compressor. */
static int check_variant(shoal_comm_t comm, int rank, int n, const variant_t *v, size_t count)
{
    size_t bytes = (count ? count : 1) * sizeof(float);
    float *x = malloc(bytes), *y[STEPS], *res = malloc(bytes);
    double *sum_in = calloc(count + 1, sizeof(double)), *sum_out = calloc(count + 1, 8);
    double *mag = calloc(count + 1, sizeof(double)), *all_res = malloc((count + 1) * 8);
    RANK_CHECK(x && res && sum_in && sum_out && mag && all_res, fail, "out of memory");
    shoal_compressor_t c = make(comm, v, count, 1, SHOAL_FLOAT32);
    RANK_CHECK(c, fail, "%s: create: %s", v->name, shoal_comm_last_error(comm));
    /* The unfused path: no error feedback of its own, fed x + residual. */
    shoal_compressor_t twin = make(comm, v, count, 0, SHOAL_FLOAT32);
    float *x2 = malloc(bytes), *y2 = malloc(bytes);
    RANK_CHECK(twin && x2 && y2, fail, "%s: twin: %s", v->name, shoal_comm_last_error(comm));
    size_t state_bytes = 0;
    RANK_CHECK(shoal_compressor_state_size(c, &state_bytes) == SHOAL_OK, fail, "state size");
    void *saved = malloc(state_bytes);
    RANK_CHECK(saved, fail, "out of memory");
    for (int t = 0; t < STEPS; t++) {
        y[t] = malloc(bytes);
        RANK_CHECK(y[t], fail, "out of memory");
        for (size_t i = 0; i < count; i++)
            x[i] = input(rank, i, t);
        const float *r_old = NULL;
        RANK_CHECK(shoal_compressor_residual(c, &r_old) == SHOAL_OK && r_old, fail, "residual");
        for (size_t i = 0; i < count; i++)
            x2[i] = x[i] + r_old[i];
        shoal_compress_info_t info;
        shoal_status_t s;
        if (t % 2) {
            shoal_request_t req;
            s = shoal_iallreduce_compressed(c, x, y[t], SHOAL_SUM, &info, &req);
            if (s == SHOAL_OK)
                s = shoal_wait(&req);
        } else {
            s = shoal_allreduce_compressed(c, x, y[t], SHOAL_SUM, &info);
        }
        RANK_CHECK(s == SHOAL_OK, fail, "%s count %zu step %d: %s", v->name, count, t,
                   shoal_comm_last_error(comm));
        RANK_CHECK(harness_same_bytes(comm, y[t], count * sizeof(float)), fail,
                   "%s count %zu step %d: ranks differ", v->name, count, t);
        RANK_CHECK(shoal_allreduce_compressed(twin, x2, y2, SHOAL_SUM, NULL) == SHOAL_OK, fail,
                   "twin: %s", shoal_comm_last_error(comm));
        RANK_CHECK(!memcmp(y[t], y2, count * sizeof(float)), fail,
                   "%s count %zu step %d: fused error feedback differs from the unfused path",
                   v->name, count, t);
        RANK_CHECK(info.step == (uint64_t)t, fail, "info.step %llu", (unsigned long long)info.step);
        RANK_CHECK((info.bytes_sent > 0) == (n > 1 && count > 0), fail, "bytes sent %llu",
                   (unsigned long long)info.bytes_sent);
        /* int8: 4 B of fp32 become 1 B plus a scale per block; ternary's
         * 4-bit codes (up to 7 ranks) 1/2 B plus the scales' all-reduce. */
        double least = v->kind == SHOAL_COMPRESS_INT8   ? 3
                       : v->kind == SHOAL_COMPRESS_SIGN ? 15 /* 1 bit and 4 B a block */
                       : v->kind == SHOAL_COMPRESS_INT4 ? 6
                       : n <= 7                         ? 6
                                                        : 3;
        if (n > 1 && count >= 60000 && v->kind != SHOAL_COMPRESS_POWERSGD)
            RANK_CHECK(info.ratio > least, fail, "%s: ratio %.2f", v->name, info.ratio);
        if (t == 1)
            RANK_CHECK(shoal_compressor_get_state(c, saved, state_bytes) == SHOAL_OK, fail, "get");
        double err = 0, norm = 0;
        for (size_t i = 0; i < count; i++) {
            double e = 0;
            for (int r = 0; r < n; r++) {
                e += input(r, i, t);
                mag[i] += fabs(input(r, i, t));
            }
            sum_in[i] += e;
            sum_out[i] += y[t][i];
            mag[i] += fabs(y[t][i]);
            err += (y[t][i] - e) * (y[t][i] - e);
            norm += e * e;
        }
        /* int8 at the first step (no residual yet): the codec's error. */
        if (t == 0 && v->kind == SHOAL_COMPRESS_INT8 && count > 0 && n > 1)
            RANK_CHECK(sqrt(err / norm) < 0.02, fail, "%s: relative error %g", v->name,
                       sqrt(err / norm));
        if (n == 1 && v->kind != SHOAL_COMPRESS_POWERSGD)
            RANK_CHECK(err == 0, fail, "one rank must return its input exactly");
    }
    /* The residuals over the ranks: exact sum of inputs minus results. */
    const float *r_now = NULL;
    RANK_CHECK(shoal_compressor_residual(c, &r_now) == SHOAL_OK && r_now, fail, "residual");
    for (size_t i = 0; i < count; i++)
        all_res[i] = r_now[i];
    if (count)
        RANK_CHECK(shoal_allreduce(all_res, all_res, count, SHOAL_FLOAT64, SHOAL_SUM, comm) ==
                       SHOAL_OK, fail, "residual sum");
    double most = 0;
    for (size_t i = 0; i < count; i++)
        most = mag[i] > most ? mag[i] : most;
    for (size_t i = 0; i < count; i++) {
        double gap = fabs(sum_in[i] - sum_out[i] - all_res[i]);
        RANK_CHECK(gap <= 4e-6 * most + 1e-30, fail, "%s count %zu: value %zu: inputs %g - results "
                   "%g != residuals %g", v->name, count, i, sum_in[i], sum_out[i], all_res[i]);
    }
    /* PowerSGD: the vectors (plain) are exact sums at every step. */
    if (v->kind == SHOAL_COMPRESS_POWERSGD && count == PS_COUNT) {
        size_t at = 37 * 29;
        for (size_t i = at; i < at + 13; i++) {
            double e = 0;
            for (int r = 0; r < n; r++)
                e += input(r, i, STEPS - 1);
            RANK_CHECK(fabs(y[STEPS - 1][i] - e) <= 1e-5 * mag[i], fail, "vector value %zu", i);
        }
    }
    /* Replay from the state after step 1 in a new compressor. */
    shoal_compressor_t c2 = make(comm, v, count, 1, SHOAL_FLOAT32);
    RANK_CHECK(c2, fail, "create 2");
    unsigned char *junk = malloc(state_bytes + 1);
    RANK_CHECK(junk, fail, "out of memory");
    memcpy(junk, saved, state_bytes);
    RANK_CHECK(shoal_compressor_set_state(c2, junk, state_bytes + 1) == SHOAL_ERR_INVALID_ARG, fail,
               "a state of the wrong size was taken");
    junk[0] ^= 1;
    RANK_CHECK(shoal_compressor_set_state(c2, junk, state_bytes) == SHOAL_ERR_INVALID_ARG, fail,
               "a damaged state was taken");
    RANK_CHECK(shoal_compressor_set_state(c2, saved, state_bytes) == SHOAL_OK, fail, "set");
    for (int t = 2; t < STEPS; t++) {
        for (size_t i = 0; i < count; i++)
            x[i] = input(rank, i, t);
        RANK_CHECK(shoal_allreduce_compressed(c2, x, x, SHOAL_SUM, NULL) == SHOAL_OK, fail,
                   "replay: %s", shoal_comm_last_error(comm));
        RANK_CHECK(!memcmp(x, y[t], count * sizeof(float)), fail, "%s count %zu: replay of step %d "
                   "differs", v->name, count, t);
    }
    /* reset: the first step again, as a new compressor gives it. */
    RANK_CHECK(shoal_compressor_reset(c2) == SHOAL_OK, fail, "reset");
    for (size_t i = 0; i < count; i++)
        x[i] = input(rank, i, 0);
    RANK_CHECK(shoal_allreduce_compressed(c2, x, x, SHOAL_SUM, NULL) == SHOAL_OK, fail,
               "after reset");
    RANK_CHECK(!memcmp(x, y[0], count * sizeof(float)), fail, "%s: reset differs from new",
               v->name);
    RANK_CHECK(shoal_compressor_destroy(c2) == SHOAL_OK, fail, "destroy 2");
    RANK_CHECK(shoal_compressor_destroy(c) == SHOAL_OK, fail, "destroy");
    RANK_CHECK(shoal_compressor_destroy(twin) == SHOAL_OK, fail, "destroy twin");
    free(x2);
    free(y2);
    for (int t = 0; t < STEPS; t++)
        free(y[t]);
    free(junk);
    free(saved);
    free(x);
    free(res);
    free(sum_in);
    free(sum_out);
    free(mag);
    free(all_res);
    return 0;
fail:
    return 1;
}

static const size_t counts[] = {0, 1, 65, 1001, 3 * 8 * 3616 + 77};

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    for (size_t v = 0; v < NVARIANTS; v++) {
        if (variants[v].kind == SHOAL_COMPRESS_POWERSGD) {
            if (check_variant(comm, rank, nranks, &variants[v], PS_COUNT))
                return 1;
            continue;
        }
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            if (check_variant(comm, rank, nranks, &variants[v], counts[k]))
                return 1;
        }
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_matrix(const char *transport, int nranks)
{
    if (!harness_ranks_wanted(nranks))
        return;
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, rank_matrix, NULL, 600), 0);
}

#define MATRIX_TEST(tl, n)                                                    \
    static void test_##tl##_##n(void **state)                                 \
    {                                                                         \
        (void)state;                                                          \
        run_matrix(#tl, n);                                                   \
    }
MATRIX_TEST(shm, 1) MATRIX_TEST(shm, 2) MATRIX_TEST(shm, 3) MATRIX_TEST(shm, 4)
MATRIX_TEST(shm, 5) MATRIX_TEST(shm, 6) MATRIX_TEST(shm, 7) MATRIX_TEST(shm, 8)
MATRIX_TEST(tcp, 2) MATRIX_TEST(tcp, 3) MATRIX_TEST(tcp, 5) MATRIX_TEST(tcp, 8)

/* float16 and bfloat16 buffers, AVG, and the stateless int8 call. */
static int rank_dtypes(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = 5003;
    uint16_t *h = malloc(count * 2), *o = malloc(count * 2);
    float *f = malloc(count * 4), *g = malloc(count * 4);
    RANK_CHECK(h && o && f && g, fail, "out of memory");
    static const shoal_dtype_t dts[] = {SHOAL_FLOAT16, SHOAL_BFLOAT16};
    for (int d = 0; d < 2; d++) {
        shoal_dtype_t dt = dts[d];
        for (int stateless = 0; stateless < 2; stateless++) {
            for (int avg = 0; avg < 2; avg++) {
                for (size_t i = 0; i < count; i++)
                    shoal_dtype_set_f64(h, i, dt, input(rank, i, 0));
                shoal_compressor_t c = stateless ? NULL
                                                 : make(comm, &variants[0], count, 1, dt);
                RANK_CHECK(stateless || c, fail, "create %s", shoal_comm_last_error(comm));
                shoal_op_t op = avg ? SHOAL_AVG : SHOAL_SUM;
                shoal_status_t s = stateless
                                       ? shoal_allreduce_int8(h, o, count, dt, op, comm, NULL)
                                       : shoal_allreduce_compressed(c, h, o, op, NULL);
                RANK_CHECK(s == SHOAL_OK, fail, "%s: %s", shoal_dtype_name(dt),
                           shoal_comm_last_error(comm));
                RANK_CHECK(harness_same_bytes(comm, o, count * 2), fail, "ranks differ");
                double err = 0, norm = 0;
                for (size_t i = 0; i < count; i++) {
                    double e = 0;
                    for (int r = 0; r < n; r++) {
                        uint16_t one;
                        shoal_dtype_set_f64(&one, 0, dt, input(r, i, 0));
                        e += dt == SHOAL_FLOAT16 ? shoal_f16_to_f32(one) : shoal_bf16_to_f32(one);
                    }
                    e /= avg ? n : 1;
                    double got = dt == SHOAL_FLOAT16 ? shoal_f16_to_f32(o[i])
                                                     : shoal_bf16_to_f32(o[i]);
                    err += (got - e) * (got - e);
                    norm += e * e;
                }
                RANK_CHECK(sqrt(err / norm) < 0.02, fail, "%s %s: relative error %g",
                           shoal_dtype_name(dt), avg ? "avg" : "sum", sqrt(err / norm));
                if (c)
                    RANK_CHECK(shoal_compressor_destroy(c) == SHOAL_OK, fail, "destroy");
            }
        }
    }
    /* fp32 stateless: the same as a compressor with int8 defaults and no
     * error feedback; info filled in. */
    for (size_t i = 0; i < count; i++)
        f[i] = input(rank, i, 1);
    shoal_compress_info_t info;
    RANK_CHECK(shoal_allreduce_int8(f, g, count, SHOAL_FLOAT32, SHOAL_SUM, comm, &info) ==
                   SHOAL_OK, fail, "stateless");
    RANK_CHECK((info.bytes_sent > 0) == (n > 1), fail, "stateless info");
    shoal_compressor_t c = make(comm, &variants[0], count, 0, SHOAL_FLOAT32);
    RANK_CHECK(c, fail, "create");
    RANK_CHECK(shoal_allreduce_compressed(c, f, f, SHOAL_SUM, NULL) == SHOAL_OK, fail,
               "compressed");
    RANK_CHECK(!memcmp(f, g, count * 4), fail,
               "stateless differs from a compressor without feedback");
    RANK_CHECK(shoal_compressor_destroy(c) == SHOAL_OK, fail, "destroy");
    /* In a group: two compressors and a plain all-reduce run at the end,
     * each as it would alone. */
    {
        shoal_compressor_t a = make(comm, &variants[0], count, 1, SHOAL_FLOAT32);
        shoal_compressor_t b = make(comm, &variants[3], count, 1, SHOAL_FLOAT32);
        shoal_compressor_t a2 = make(comm, &variants[0], count, 1, SHOAL_FLOAT32);
        shoal_compressor_t b2 = make(comm, &variants[3], count, 1, SHOAL_FLOAT32);
        RANK_CHECK(a && b && a2 && b2, fail, "create");
        float *ya = malloc(count * 4), *yb = malloc(count * 4), *p = malloc(count * 4);
        float *za = malloc(count * 4), *zb = malloc(count * 4);
        RANK_CHECK(ya && yb && p && za && zb, fail, "out of memory");
        for (size_t i = 0; i < count; i++)
            f[i] = input(rank, i, 2);
        RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group");
        RANK_CHECK(shoal_allreduce_compressed(a, f, ya, SHOAL_SUM, NULL) == SHOAL_OK, fail, "a");
        RANK_CHECK(shoal_allreduce(f, p, count, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
                   "plain");
        RANK_CHECK(shoal_allreduce_compressed(b, f, yb, SHOAL_AVG, NULL) == SHOAL_OK, fail, "b");
        RANK_CHECK(shoal_group_end() == SHOAL_OK, fail, "group end: %s",
                   shoal_comm_last_error(comm));
        RANK_CHECK(shoal_allreduce_compressed(a2, f, za, SHOAL_SUM, NULL) == SHOAL_OK, fail, "a2");
        RANK_CHECK(shoal_allreduce_compressed(b2, f, zb, SHOAL_AVG, NULL) == SHOAL_OK, fail, "b2");
        RANK_CHECK(!memcmp(ya, za, count * 4) && !memcmp(yb, zb, count * 4), fail,
                   "a group changed the results");
        RANK_CHECK(shoal_allreduce(f, g, count, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
                   "plain");
        RANK_CHECK(!memcmp(p, g, count * 4), fail, "a group changed the plain all-reduce");
        shoal_compressor_destroy(a);
        shoal_compressor_destroy(b);
        shoal_compressor_destroy(a2);
        shoal_compressor_destroy(b2);
        free(ya);
        free(yb);
        free(p);
        free(za);
        free(zb);
    }
    /* PowerSGD's warm-up: the first calls are plain all-reduces (exact up
     * to the order of the sum, no residual), the next one is compressed. */
    {
        size_t rows[] = {50, 1}, cols[] = {40, count - 2000};
        shoal_compress_layout_t lay = {2, rows, cols};
        shoal_compress_options_t wo;
        shoal_compress_options_init(&wo, SHOAL_COMPRESS_POWERSGD);
        wo.rank = 2;
        wo.warmup_steps = 2;
        shoal_compressor_t w;
        RANK_CHECK(shoal_compressor_create(comm, &wo, count, SHOAL_FLOAT32, &lay, &w) == SHOAL_OK,
                   fail, "create: %s", shoal_comm_last_error(comm));
        for (int t = 0; t < 3; t++) {
            for (size_t i = 0; i < count; i++)
                f[i] = input(rank, i, t);
            shoal_compress_info_t wi;
            RANK_CHECK(shoal_allreduce_compressed(w, f, g, SHOAL_SUM, &wi) == SHOAL_OK, fail,
                       "warm-up step %d: %s", t, shoal_comm_last_error(comm));
            double worst = 0;
            for (size_t i = 0; i < 2000; i++) {
                double e = 0;
                for (int r = 0; r < n; r++)
                    e += input(r, i, t);
                worst = fmax(worst, fabs(g[i] - e) / (fabs(e) + 1e-3));
            }
            const float *res;
            RANK_CHECK(shoal_compressor_residual(w, &res) == SHOAL_OK, fail, "residual");
            float most = 0;
            for (size_t i = 0; i < count; i++)
                most = fmaxf(most, fabsf(res[i]));
            if (t < 2) {
                RANK_CHECK(worst < 1e-5 && most == 0, fail,
                           "warm-up step %d: error %g, residual %g", t, worst, most);
                RANK_CHECK(n == 1 || wi.ratio < 1.01, fail, "warm-up ratio %g", wi.ratio);
            } else {
                RANK_CHECK(worst > 1e-2 && most > 0, fail, "step %d after warm-up: error %g, "
                           "residual %g: not compressed", t, worst, most);
                RANK_CHECK(n == 1 || wi.ratio > 1.5, fail, "ratio after warm-up %g", wi.ratio);
            }
        }
        RANK_CHECK(shoal_compressor_destroy(w) == SHOAL_OK, fail, "destroy");
    }
    /* Inside a group the stateless call is refused (it keeps nothing
     * until the group ends). */
    RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group");
    RANK_CHECK(shoal_allreduce_int8(f, g, count, SHOAL_FLOAT32, SHOAL_SUM, comm, NULL) ==
                   SHOAL_ERR_INVALID_ARG, fail, "stateless in a group");
    RANK_CHECK(shoal_group_end() == SHOAL_OK, fail, "group end");
    free(h);
    free(o);
    free(f);
    free(g);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* The ternary scales travel as bf16 rounded up: every result is a whole
 * number (at most n in size) of its block's shared scale, the bf16 just at
 * or above the largest value of the block over the ranks. A scale that
 * kept fp32 bits would leave most results off those multiples. */
static uint16_t bf16_at_or_above(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    uint16_t h = (uint16_t)(u >> 16);
    return (u & 0xffffu) ? (uint16_t)(h + 1) : h;
}

static int rank_ternary_scales(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    enum { COUNT = 1001, BLOCK = 32 };
    shoal_comm_t comm = NULL;
    shoal_compressor_t c = NULL;
    float x[COUNT], y[COUNT];
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_TERNARY);
    o.block = BLOCK;
    o.error_feedback = 0;
    RANK_CHECK(shoal_compressor_create(comm, &o, COUNT, SHOAL_FLOAT32, NULL, &c) == SHOAL_OK,
               fail, "create: %s", shoal_comm_last_error(comm));
    for (size_t i = 0; i < COUNT; i++)
        x[i] = input(rank, i, 0);
    RANK_CHECK(shoal_allreduce_compressed(c, x, y, SHOAL_SUM, NULL) == SHOAL_OK, fail,
               "allreduce: %s", shoal_comm_last_error(comm));
    int nonzero = 0;
    for (size_t b0 = 0; b0 < COUNT; b0 += BLOCK) {
        size_t end = b0 + BLOCK < COUNT ? b0 + BLOCK : COUNT;
        float amax = 0;
        for (int r = 0; r < n; r++) {
            for (size_t i = b0; i < end; i++)
                amax = fmaxf(amax, fabsf(input(r, i, 0)));
        }
        uint32_t bits = (uint32_t)bf16_at_or_above(amax) << 16;
        float scale;
        memcpy(&scale, &bits, sizeof(scale));
        for (size_t i = b0; i < end; i++) {
            float k = y[i] / scale;
            RANK_CHECK(k == rintf(k) && fabsf(k) <= (float)n && k * scale == y[i], fail,
                       "value %zu: %g is %g times the block's scale %g (largest value %g)", i,
                       (double)y[i], (double)k, (double)scale, (double)amax);
            nonzero += y[i] != 0;
        }
    }
    RANK_CHECK(nonzero > COUNT / 4, fail, "only %d of %d results are not 0", nonzero, COUNT);
    shoal_compressor_destroy(c);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    if (c)
        shoal_compressor_destroy(c);
    if (comm)
        shoal_comm_abort(comm);
    return 1;
}

static void test_ternary_scales(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    /* (A rank alone keeps its input exactly.) */
    const int ns[] = {2, 3, 5};
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
        assert_int_equal(harness_run_ranks(ns[k], rank_ternary_scales, NULL, 300), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rank_ternary_scales, NULL, 300), 0);
}

static void test_dtypes(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(3, rank_dtypes, NULL, 300), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rank_dtypes, NULL, 300), 0);
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(1, rank_dtypes, NULL, 300), 0);
}

/* create: options that differ on one rank, or are invalid on one rank,
 * fail on every rank, which can go on using comm. Bad calls too. */
static int rank_bad(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    shoal_compress_options_t o;
    shoal_compressor_t c = NULL;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_INT8);
    if (n > 1) {
        o.block = rank == n - 1 ? 32 : 64;
        RANK_CHECK(shoal_compressor_create(comm, &o, 100, SHOAL_FLOAT32, NULL, &c) ==
                       SHOAL_ERR_INVALID_ARG, fail, "different blocks were taken");
        RANK_CHECK(strstr(shoal_comm_last_error(comm), "differ"), fail, "message: %s",
                   shoal_comm_last_error(comm));
        o.block = 64;
        RANK_CHECK(shoal_compressor_create(comm, &o, 100, rank ? SHOAL_FLOAT32 : SHOAL_FLOAT16,
                                           NULL, &c) == SHOAL_ERR_INVALID_ARG, fail,
                   "different dtypes were taken");
    }
    o.block = rank == n - 1 ? 33 : 64;
    RANK_CHECK(shoal_compressor_create(comm, &o, 100, SHOAL_FLOAT32, NULL, &c) ==
                   SHOAL_ERR_INVALID_ARG, fail, "an invalid block was taken");
    o.block = 64;
    size_t rows[] = {10, 9}, cols[] = {10, 1};
    shoal_compress_layout_t bad = {2, rows, cols};
    RANK_CHECK(shoal_compressor_create(comm, &o, 100, SHOAL_FLOAT32, &bad, &c) ==
                   SHOAL_ERR_INVALID_ARG, fail, "a layout of 109 values for 100 was taken");
    shoal_compress_options_init(&o, SHOAL_COMPRESS_TERNARY);
    o.algo = SHOAL_COMPRESS_ALGO_TWO_SHOT;
    RANK_CHECK(shoal_compressor_create(comm, &o, 100, SHOAL_FLOAT32, NULL, &c) ==
                   SHOAL_ERR_INVALID_ARG, fail, "ternary two-shot was taken");
    shoal_compress_options_init(&o, SHOAL_COMPRESS_INT8);
    RANK_CHECK(shoal_compressor_create(comm, &o, 100, SHOAL_INT32, NULL, &c) ==
                   SHOAL_ERR_INVALID_ARG, fail, "int32 was taken");
    RANK_CHECK(c == NULL, fail, "a failed create wrote its handle");
    /* Still usable: a good one, then bad calls on it. */
    RANK_CHECK(shoal_compressor_create(comm, &o, 100, SHOAL_FLOAT32, NULL, &c) == SHOAL_OK, fail,
               "create: %s", shoal_comm_last_error(comm));
    float x[100] = {0}, y[100];
    RANK_CHECK(shoal_allreduce_compressed(c, x, y, SHOAL_PROD, NULL) == SHOAL_ERR_INVALID_ARG, fail,
               "PROD taken");
    RANK_CHECK(shoal_allreduce_compressed(c, NULL, y, SHOAL_SUM, NULL) ==
                   SHOAL_ERR_INVALID_ARG, fail, "NULL sendbuf taken");
    RANK_CHECK(shoal_allreduce_compressed(NULL, x, y, SHOAL_SUM, NULL) ==
                   SHOAL_ERR_INVALID_ARG, fail, "NULL compressor taken");
    RANK_CHECK(shoal_allreduce_compressed(c, x, y, SHOAL_SUM, NULL) == SHOAL_OK, fail, "after: %s",
               shoal_comm_last_error(comm));
    RANK_CHECK(shoal_compressor_destroy(c) == SHOAL_OK, fail, "destroy");
    RANK_CHECK(shoal_compressor_destroy(NULL) == SHOAL_ERR_INVALID_ARG, fail, "destroy NULL");
    RANK_CHECK(shoal_compress_options_init(&o, (shoal_compress_kind_t)9) ==
                   SHOAL_ERR_INVALID_ARG, fail, "kind 9");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_bad(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(3, rank_bad, NULL, 120), 0);
    assert_int_equal(harness_run_ranks(1, rank_bad, NULL, 120), 0);
}

/* Rank 0 calls a plain all-reduce, the others the compressed one: every
 * rank fails, and the compressor's state is as before the call. */
static int rank_mismatch(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    int *status = arg;
    const variant_t *v = &variants[status[8]];
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = v->kind == SHOAL_COMPRESS_POWERSGD ? PS_COUNT : 5000;
    float *x = malloc(count * 4), *y = malloc(count * 4);
    RANK_CHECK(x && y, fail, "out of memory");
    for (size_t i = 0; i < count; i++)
        x[i] = input(rank, i, 0);
    shoal_compressor_t c = make(comm, v, count, 1, SHOAL_FLOAT32);
    RANK_CHECK(c, fail, "create");
    RANK_CHECK(shoal_allreduce_compressed(c, x, y, SHOAL_SUM, NULL) == SHOAL_OK, fail, "first");
    size_t sb;
    shoal_compressor_state_size(c, &sb);
    void *before = malloc(sb), *after = malloc(sb);
    RANK_CHECK(before && after, fail, "out of memory");
    shoal_compressor_get_state(c, before, sb);
    shoal_status_t s = rank == 0 ? shoal_allreduce(x, y, count, SHOAL_FLOAT32, SHOAL_SUM, comm)
                                 : shoal_allreduce_compressed(c, x, y, SHOAL_SUM, NULL);
    status[rank] = (int)s;
    RANK_CHECK(shoal_compressor_get_state(c, after, sb) == SHOAL_OK, fail, "get after");
    RANK_CHECK(!memcmp(before, after, sb), fail, "a failed call changed the state");
    shoal_compressor_destroy(c);
    free(before);
    free(after);
    free(x);
    free(y);
    shoal_comm_abort(comm);
    return 0;
fail:
    return 1;
}

static void test_mismatch(void **state)
{
    (void)state;
    int *status = mmap(NULL, 9 * sizeof(int), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(status != MAP_FAILED);
    static const char *tls[] = {"shm", "tcp"};
    for (size_t v = 0; v < NVARIANTS; v++) {
        for (int tl = 0; tl < 2; tl++) {
            for (int r = 0; r < 8; r++)
                status[r] = -1;
            status[8] = (int)v;
            harness_use_transport(tls[tl], TEST_CHUNK);
            harness_setenv("SHOAL_TIMEOUT", "5s");
            assert_int_equal(harness_run_ranks(3, rank_mismatch, status, 60), 0);
            for (int r = 0; r < 3; r++) {
                if (status[r] == SHOAL_OK)
                    fprintf(stderr, "# %s over %s: rank %d succeeded\n", variants[v].name,
                            tls[tl], r);
                assert_int_not_equal(status[r], SHOAL_OK);
            }
        }
    }
    munmap(status, 9 * sizeof(int));
}

/* Calls that never run leave their compressors free: rank 0 issues one
 * call on each of three compressors, non-blocking (the first waits for
 * rank 1, which never joins it; the second queues behind it) and in a
 * group that ends after the abort; then aborts. Every call completes with
 * an error, and every compressor can be destroyed (before, the second's
 * and the third's stayed busy for good, and their destroy refused). */
static int rank_never_run(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_INT8);
    shoal_compressor_t c[3];
    for (int i = 0; i < 3; i++)
        RANK_CHECK(shoal_compressor_create(comm, &o, 1000, SHOAL_FLOAT32, NULL, &c[i]) ==
                       SHOAL_OK, fail, "create %d: %s", i, shoal_comm_last_error(comm));
    /* Rank 1 leaves without another call: rank 0's first call finds it
     * gone, or meets the abort below, whichever comes first. */
    if (rank == 1) {
        for (int i = 0; i < 3; i++)
            shoal_compressor_destroy(c[i]);
        shoal_comm_destroy(comm);
        return 0;
    }
    float x[1000] = {0}, y[3][1000];
    shoal_request_t req[3];
    for (int i = 0; i < 2; i++)
        RANK_CHECK(shoal_iallreduce_compressed(c[i], x, y[i], SHOAL_SUM, NULL, &req[i]) ==
                       SHOAL_OK, fail, "issue %d: %s", i, shoal_comm_last_error(comm));
    RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group start");
    RANK_CHECK(shoal_iallreduce_compressed(c[2], x, y[2], SHOAL_SUM, NULL, &req[2]) == SHOAL_OK,
               fail, "issue 2 in a group: %s", shoal_comm_last_error(comm));
    shoal_comm_abort(comm);
    RANK_CHECK(shoal_group_end() != SHOAL_OK, fail, "a group on an aborted communicator ended");
    for (int i = 0; i < 3; i++)
        RANK_CHECK(shoal_wait(&req[i]) != SHOAL_OK, fail, "call %d succeeded", i);
    for (int i = 0; i < 3; i++)
        RANK_CHECK(shoal_compressor_destroy(c[i]) == SHOAL_OK, fail,
                   "compressor %d still busy after its call failed", i);
    shoal_comm_destroy(comm);
    return 0;
fail:
    return 1;
}

static void test_never_run(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "10s");
    assert_int_equal(harness_run_ranks(2, rank_never_run, NULL, 60), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad),      cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_never_run),
        cmocka_unit_test(test_dtypes),   cmocka_unit_test(test_ternary_scales),
        cmocka_unit_test(test_shm_1),
        cmocka_unit_test(test_shm_2),    cmocka_unit_test(test_shm_3),
        cmocka_unit_test(test_shm_4),    cmocka_unit_test(test_shm_5),
        cmocka_unit_test(test_shm_6),    cmocka_unit_test(test_shm_7),
        cmocka_unit_test(test_shm_8),    cmocka_unit_test(test_tcp_2),
        cmocka_unit_test(test_tcp_3),    cmocka_unit_test(test_tcp_5),
        cmocka_unit_test(test_tcp_8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
