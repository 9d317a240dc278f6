/* The ternary codec (compress/ternary.c) against its documented semantics:
 * codes in {-1, 0, 1} drawn from the shared random stream, unbiased decode,
 * exact integer sums over ranks (and saturation beyond them), the residual
 * identity, runs cut into pieces, the scale helpers, and the SIMD kernels
 * against the scalar reference bit for bit, with NaN, infinities, signed
 * zeros, subnormals, zero scales and indices that cross 2^32. */
#include "harness.h"

#include "compress/codec.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BIG_COUNT (((size_t)1 << 20) + 3)

static const size_t counts[] = {0, 1, 31, 64, 65, 1000, 4099, BIG_COUNT};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))
static const size_t blocks[] = {32, 64, 128};
#define NBLOCKS (sizeof(blocks) / sizeof(blocks[0]))
/* Just below 2^32: a run from there crosses the wrap of the index's low
 * half, where the kernels start a new segment. */
static const size_t firsts[] = {0, 5, ((size_t)1 << 32) - 37};
#define NFIRSTS (sizeof(firsts) / sizeof(firsts[0]))

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Uniform in [-a, a). */
static float rng_float(float a)
{
    return (float)((double)(rng_next() >> 11) / 0x1p53 * 2.0 - 1.0) * a;
}

/* Inputs around a scale of about 1: mostly ordinary values, some beyond
 * the scale (clipped), exact zeros of both signs, and with specials now
 * and then NaN, infinities and subnormals. */
static void fill_input(float *x, size_t count, int specials)
{
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN,
                                    FLT_TRUE_MIN, -0x1p-140f};
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rng_next();
        if (specials && r % 16 == 0)
            x[i] = special[(r >> 8) % 8];
        else if (r % 16 == 1)
            x[i] = (r >> 8) % 2 ? 0.0f : -0.0f;
        else
            x[i] = rng_float(r % 16 < 5 ? 4.0f : 1.5f);
    }
}

/* Scales of blocks [0, nblocks) in a reservation that is only touched
 * from block `from`: the blocks of indices near 2^32 need an array of
 * 2^27 floats, of which a run uses a few. */
typedef struct {
    float *scales;
    size_t bytes;
} scales_t;

static void scales_init(scales_t *s, size_t first, size_t count, size_t block, int zeros)
{
    size_t from = first / block, to = (first + count) / block + 1;
    s->bytes = to * sizeof(float);
    void *p = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    assert_true(p != MAP_FAILED);
    s->scales = p;
    for (size_t b = from; b < to; b++) {
        uint64_t r = rng_next();
        if (zeros && r % 8 == 0)
            s->scales[b] = 0.0f;
        else if (zeros && r % 8 == 1)
            s->scales[b] = 0x1p-130f; /* subnormal */
        else
            s->scales[b] = 0.5f + (float)(r >> 40) / 0x1p24f * 2.0f;
    }
}

static void scales_free(scales_t *s)
{
    munmap(s->scales, s->bytes);
}

static shoal_codec_t make_codec(size_t block, int wide, shoal_round_t round, uint64_t seed,
                                uint64_t step, const float *scales)
{
    shoal_codec_t c = {
        .ops = &shoal_codec_ternary,
        .block = block,
        .round = round,
        .seed = seed,
        .step = step,
        .scales = scales,
        .wide = wide,
    };
    return c;
}

static int32_t wire_at(const void *wire, size_t i, int wide)
{
    if (wide) {
        int16_t v;
        memcpy(&v, (const unsigned char *)wire + 2 * i, sizeof(v));
        return v;
    }
    return ((const int8_t *)wire)[i];
}

static void check_bytes(const void *got, const void *want, size_t bytes, const char *what)
{
    if (memcmp(got, want, bytes) == 0)
        return;
    for (size_t i = 0; i < bytes; i++)
        if (((const unsigned char *)got)[i] != ((const unsigned char *)want)[i])
            fail_msg("%s: byte %zu: got 0x%02x, want 0x%02x", what, i,
                     ((const unsigned char *)got)[i], ((const unsigned char *)want)[i]);
}

/* ---- the table and the codes themselves ---- */

static void test_ops_table(void **state)
{
    shoal_codec_t c = make_codec(64, 0, SHOAL_ROUND_STOCHASTIC, 1, 0, NULL);
    assert_int_equal(shoal_codec_ternary.size, sizeof(shoal_codec_ops_t));
    assert_string_equal(shoal_codec_ternary.name, "ternary");
    assert_int_equal(c.ops->wire_bytes(&c, 0), 0);
    assert_int_equal(c.ops->wire_bytes(&c, 4099), 4099);
    c.wide = 1;
    assert_int_equal(c.ops->wire_bytes(&c, 4099), 8198);
}

/* The documented code, computed here from the header's random stream: the
 * library's reference and kernels must both give exactly this. */
static int32_t expected_code(const shoal_codec_t *c, float x, uint64_t index)
{
    float scale = c->scales[index / c->block];
    if (!(scale > 0.0f) || isnan(x))
        return 0;
    float p = fabsf(x) / scale; /* in float, as documented */
    if (p > 1.0f)
        p = 1.0f;
    int up;
    if (c->round == SHOAL_ROUND_NEAREST)
        up = p >= 0.5f;
    else
        up = shoal_codec_uniform(shoal_codec_key(c->seed, c->step), index) < p;
    return up ? (x < 0.0f ? -1 : 1) : 0;
}

static void check_codes(size_t count, size_t block, size_t first, int wide, shoal_round_t round,
                        int simd)
{
    char what[160];
    snprintf(what, sizeof(what), "codes: count %zu block %zu first %zu wide %d round %d simd %d",
             count, block, first, wide, (int)round, simd);
    scales_t s;
    scales_init(&s, first, count, block, 1);
    shoal_codec_t c = make_codec(block, wide, round, 7, 3, s.scales);
    float *x = harness_alloc_guarded(count * sizeof(float));
    float *res = harness_alloc_guarded(count * sizeof(float));
    size_t wb = c.ops->wire_bytes(&c, count);
    void *wire = harness_alloc_guarded(wb);
    fill_input(x, count, 1);
    shoal_codec_simd_enable(simd);
    c.ops->encode(&c, wire, x, NULL, res, count, first);
    for (size_t i = 0; i < count; i++) {
        int32_t k = wire_at(wire, i, wide);
        float scale = s.scales[(first + i) / block];
        if (k != expected_code(&c, x[i], first + i))
            fail_msg("%s: value %zu (%a, scale %a): code %d, want %d", what, i, x[i], scale,
                     k, expected_code(&c, x[i], first + i));
        /* x - code * scale, bit for bit (NaN stays NaN) */
        float want = x[i] - (float)k * scale;
        if (!(isnan(want) && isnan(res[i])) && memcmp(&want, &res[i], sizeof(want)) != 0)
            fail_msg("%s: residual %zu: %a, want %a", what, i, res[i], want);
        /* a value at or beyond its (nonzero) scale always goes out whole */
        if (scale > 0.0f && fabsf(x[i]) >= scale && k != (x[i] < 0.0f ? -1 : 1))
            fail_msg("%s: value %zu (%a) beyond scale %a: code %d", what, i, x[i], scale, k);
    }
    harness_assert_guard(wire, wb, what);
    harness_assert_guard(res, count * sizeof(float), what);
    shoal_codec_simd_enable(1);
    free(x);
    free(res);
    free(wire);
    scales_free(&s);
}

static void test_codes(void **state)
{
    for (int simd = 0; simd < 2; simd++)
        for (size_t ci = 0; ci < NCOUNTS; ci++)
            for (size_t bi = 0; bi < NBLOCKS; bi++)
                for (int wide = 0; wide < 2; wide++)
                    for (int round = 0; round < 2; round++)
                        check_codes(counts[ci], blocks[bi],
                                    firsts[(ci + bi + (size_t)wide) % NFIRSTS], wide,
                                    (shoal_round_t)round, simd);
}

/* A scale of 0 sends 0 and keeps everything in the residual, whatever the
 * input; decoding gives 0. */
static void test_scale_zero(void **state)
{
    enum { N = 300 };
    float x[N], res[N], out[N];
    float scales[N / 32 + 1];
    int16_t wire[N], acc[N];
    memset(scales, 0, sizeof(scales));
    for (int simd = 0; simd < 2; simd++)
        for (int wide = 0; wide < 2; wide++) {
            shoal_codec_simd_enable(simd);
            shoal_codec_t c = make_codec(32, wide, SHOAL_ROUND_STOCHASTIC, 1, 2, scales);
            fill_input(x, N, 1);
            c.ops->encode(&c, wire, x, NULL, res, N, 0);
            for (size_t i = 0; i < N; i++) {
                assert_int_equal(wire_at(wire, i, wide), 0);
                assert_memory_equal(&res[i], &x[i], sizeof(float));
            }
            memset(acc, 0, sizeof(acc));
            c.ops->add_encode(&c, acc, acc, x, NULL, res, N, 0);
            c.ops->decode(&c, out, acc, N, 0);
            for (size_t i = 0; i < N; i++) {
                assert_int_equal(wire_at(acc, i, wide), 0);
                assert_memory_equal(&res[i], &x[i], sizeof(float));
                assert_true(out[i] == 0.0f);
            }
        }
    shoal_codec_simd_enable(1);
}

/* Round to nearest: half a scale and more goes out, less does not. */
static void test_nearest(void **state)
{
    const float scales[1] = {2.0f};
    const float x[] = {0.0f, 0.99f, 1.0f, -1.0f, -0.999f, 2.0f, 7.0f, -7.0f, NAN, -0.0f};
    const int32_t want[] = {0, 0, 1, -1, 0, 1, 1, -1, 0, 0};
    enum { N = sizeof(x) / sizeof(x[0]) };
    int8_t wire[N];
    float out[N];
    for (int simd = 0; simd < 2; simd++) {
        shoal_codec_simd_enable(simd);
        shoal_codec_t c = make_codec(32, 0, SHOAL_ROUND_NEAREST, 1, 0, scales);
        c.ops->encode(&c, wire, x, NULL, NULL, N, 0);
        c.ops->decode(&c, out, wire, N, 0);
        for (size_t i = 0; i < N; i++) {
            assert_int_equal(wire[i], want[i]);
            assert_true(out[i] == 2.0f * (float)want[i]);
        }
    }
    shoal_codec_simd_enable(1);
}

/* ---- unbiasedness ---- */

/* The mean of decode over many steps against the clipped input: within 6
 * standard errors, s * sqrt(p (1 - p) / steps), of each value (the stream
 * is deterministic, so this passes or fails the same way every time), plus
 * a hair for the 2^-24 grid of the random numbers. Values whose p is 0 or 1
 * (zero, at or beyond the scale) have no variance and must come out exact.
 * The standardised errors must also average to about 0 and have a mean
 * square of about 1. */
static void test_unbiased(void **state)
{
    enum { N = 1000, STEPS = 4000, BLOCK = 64 };
    float *x = harness_alloc_guarded(N * sizeof(float)), *out = harness_alloc_guarded(N * sizeof(float));
    float scales[N / BLOCK + 1];
    double *sum = calloc(N, sizeof(double));
    int8_t *wire = harness_alloc_guarded(N);
    assert_non_null(sum);
    for (size_t b = 0; b < N / BLOCK + 1; b++)
        scales[b] = 0.25f + (float)b * 0.125f;
    /* most within their scale, a sixth beyond it */
    for (size_t i = 0; i < N; i++)
        x[i] = rng_float(1.2f * scales[i / BLOCK]);
    x[0] = 0.0f;
    x[1] = scales[0];
    x[2] = -3.0f * scales[0];
    x[3] = 1e-3f * scales[0];
    shoal_codec_t c = make_codec(BLOCK, 0, SHOAL_ROUND_STOCHASTIC, 42, 0, scales);
    for (uint64_t t = 0; t < STEPS; t++) {
        c.step = t;
        c.ops->encode(&c, wire, x, NULL, NULL, N, 0);
        c.ops->decode(&c, out, wire, N, 0);
        for (size_t i = 0; i < N; i++)
            sum[i] += out[i];
    }
    double zsum = 0.0, z2sum = 0.0;
    size_t nz = 0;
    for (size_t i = 0; i < N; i++) {
        double s = scales[i / BLOCK];
        double clipped = fmax(-s, fmin(s, x[i]));
        double p = fabs(clipped) / s;
        double mean = sum[i] / STEPS;
        double se = s * sqrt(p * (1.0 - p) / STEPS);
        if (se == 0.0) {
            if (mean != clipped)
                fail_msg("value %zu (%a): mean %.9g, want exactly %.9g", i, x[i], mean,
                         clipped);
            continue;
        }
        double z = (mean - clipped) / se;
        if (fabs(mean - clipped) > 6.0 * se + 0x1p-22 * s)
            fail_msg("value %zu (%a): mean %.9g, want %.9g (%.2f standard errors)", i, x[i],
                     mean, clipped, z);
        zsum += z;
        z2sum += z * z;
        nz++;
    }
    assert_true(nz > N / 2);
    double zmean = zsum / (double)nz, z2mean = z2sum / (double)nz;
    if (fabs(zmean) > 6.0 / sqrt((double)nz) || z2mean < 0.8 || z2mean > 1.2)
        fail_msg("standardised errors: mean %.4f, mean square %.4f over %zu values", zmean,
                 z2mean, nz);
    free(x);
    free(out);
    free(sum);
    free(wire);
}

/* ---- sums over ranks and the residual identity ---- */

/* n ranks with seeds of their own reduce through a chain: rank 0 encodes,
 * every other rank add_encodes onto what came in (in place on odd ranks).
 * The wire must hold the scalar sum of every rank's own encode (clamped at
 * each hop where it saturates, which only happens with sat), and the sum
 * of the inputs minus the sum of the residuals must equal the decoded
 * result up to the rounding of each residual and of the decode: per value
 * within 2^-24 * (sum over ranks of (|x_r| + s) + |result|), each rounding
 * being at most half an ulp, i.e. 2^-24 of its result (the sums here are
 * in double, exact enough). */
static void check_chain(int nranks, size_t count, size_t block, size_t first, int wide,
                        int positive, int simd)
{
    char what[160];
    snprintf(what, sizeof(what),
             "chain: %d ranks count %zu block %zu first %zu wide %d positive %d simd %d", nranks,
             count, block, first, wide, positive, simd);
    const int32_t max = wide ? 32767 : 127;
    scales_t s;
    scales_init(&s, first, count, block, 0);
    size_t width = wide ? 2 : 1;
    float *x = harness_alloc_guarded(count * sizeof(float)), *res = harness_alloc_guarded(count * sizeof(float));
    float *out = harness_alloc_guarded(count * sizeof(float));
    unsigned char *wire = harness_alloc_guarded(count * width), *wire2 = harness_alloc_guarded(count * width);
    unsigned char *own = harness_alloc_guarded(count * width);
    int32_t *want = calloc(count + 1, sizeof(int32_t));
    double *xsum = calloc(count + 1, sizeof(double)), *rsum = calloc(count + 1, sizeof(double));
    double *bound = calloc(count + 1, sizeof(double));
    assert_true(want && xsum && rsum && bound);
    shoal_codec_simd_enable(simd);
    unsigned char *cur = wire;
    for (int r = 0; r < nranks; r++) {
        shoal_codec_t c = make_codec(block, wide, SHOAL_ROUND_STOCHASTIC, 1000 + (uint64_t)r,
                                     9, s.scales);
        fill_input(x, count, 0);
        for (size_t i = 0; positive && i < count; i++) /* 7 in 8 positive */
            x[i] = i % 8 ? fabsf(x[i]) : x[i];
        c.ops->encode(&c, own, x, NULL, NULL, count, first);
        if (r == 0) {
            c.ops->encode(&c, cur, x, NULL, res, count, first);
        } else {
            unsigned char *next = r % 2 ? cur : cur == wire ? wire2 : wire;
            c.ops->add_encode(&c, next, cur, x, NULL, res, count, first);
            cur = next;
        }
        for (size_t i = 0; i < count; i++) {
            int32_t k = wire_at(own, i, wide);
            if (k < -1 || k > 1)
                fail_msg("%s: rank %d value %zu: code %d", what, r, i, k);
            want[i] += k;
            want[i] = want[i] > max ? max : want[i] < -max ? -max : want[i];
            xsum[i] += x[i];
            rsum[i] += res[i];
            bound[i] += fabs(x[i]) + s.scales[(first + i) / block];
        }
    }
    for (size_t i = 0; i < count; i++)
        if (wire_at(cur, i, wide) != want[i])
            fail_msg("%s: value %zu: sum %d, want %d", what, i, wire_at(cur, i, wide),
                     want[i]);
    shoal_codec_t c = make_codec(block, wide, SHOAL_ROUND_STOCHASTIC, 0, 9, s.scales);
    c.ops->decode(&c, out, cur, count, first);
    for (size_t i = 0; i < count; i++) {
        double err = fabs(xsum[i] - rsum[i] - out[i]);
        double tol = 0x1p-24 * (bound[i] + fabs(out[i]));
        if (err > tol)
            fail_msg("%s: value %zu: inputs - residuals = %.9g, decoded %.9g (tolerance %.3g)",
                     what, i, xsum[i] - rsum[i], out[i], tol);
    }
    harness_assert_guard(wire, count * width, what);
    harness_assert_guard(wire2, count * width, what);
    harness_assert_guard(res, count * sizeof(float), what);
    harness_assert_guard(out, count * sizeof(float), what);
    shoal_codec_simd_enable(1);
    free(x);
    free(res);
    free(out);
    free(wire);
    free(wire2);
    free(own);
    free(want);
    free(xsum);
    free(rsum);
    free(bound);
    scales_free(&s);
}

static void test_sums(void **state)
{
    for (int simd = 0; simd < 2; simd++) {
        for (int n = 1; n <= 8; n++)
            for (size_t ci = 0; ci + 1 < NCOUNTS; ci++)
                for (size_t bi = 0; bi < NBLOCKS; bi++)
                    check_chain(n, counts[ci], blocks[bi], firsts[(ci + (size_t)n) % NFIRSTS],
                                n % 2, 0, simd);
        check_chain(3, BIG_COUNT, 64, 0, 0, 0, simd);
        /* the largest sums each width holds: all ranks positive */
        for (size_t bi = 0; bi < NBLOCKS; bi++) {
            check_chain(127, 4099, blocks[bi], 0, 0, bi != 1, simd);
            check_chain(200, 4099, blocks[bi], 64, 1, bi != 1, simd);
        }
    }
}

/* More ranks than int8 holds, with inputs mostly positive: the sum
 * saturates at +-127 (check_chain clamps at every hop, as documented) and
 * the residuals still account for everything, as they hold what each hop
 * did not add. */
static void test_saturation(void **state)
{
    const float scales[1] = {1.0f};
    const float x[4] = {1.0f, -1.0f, 5.0f, 0.0f};
    int8_t wire[4];
    int16_t wide[4];
    float res[4];
    for (int simd = 0; simd < 2; simd++) {
        check_chain(200, 1000, 32, 0, 0, 1, simd);
        shoal_codec_simd_enable(simd);
        /* codes 1, -1, 1 (clipped) and 0: the first fits, the others
         * saturate, and what did not go in stays in the residual */
        shoal_codec_t c = make_codec(32, 0, SHOAL_ROUND_STOCHASTIC, 0, 0, scales);
        memcpy(wire, (const int8_t[4]){126, -127, 127, 127}, sizeof(wire));
        c.ops->add_encode(&c, wire, wire, x, NULL, res, 4, 0);
        assert_memory_equal(wire, ((const int8_t[4]){127, -127, 127, 127}), sizeof(wire));
        assert_true(res[0] == 0.0f && res[1] == -1.0f && res[2] == 5.0f && res[3] == 0.0f);
        c.wide = 1;
        memcpy(wide, (const int16_t[4]){32766, -32767, 32767, -32767}, sizeof(wide));
        c.ops->add_encode(&c, wide, wide, x, NULL, res, 4, 0);
        assert_memory_equal(wide, ((const int16_t[4]){32767, -32767, 32767, -32767}),
                            sizeof(wide));
        assert_true(res[0] == 0.0f && res[1] == -1.0f && res[2] == 5.0f && res[3] == 0.0f);
    }
    shoal_codec_simd_enable(1);
}

/* ---- determinism and pieces ---- */

/* The same (seed, step, first) gives the same bytes; another step or seed
 * other bytes; a run encoded, add_encoded or decoded in pieces with the
 * right first equals the run done whole, whether the pieces are whole
 * blocks or not. */
static void check_pieces(size_t count, size_t block, size_t first, int wide, int simd)
{
    char what[160];
    snprintf(what, sizeof(what), "pieces: count %zu block %zu first %zu wide %d simd %d", count,
             block, first, wide, simd);
    scales_t s;
    scales_init(&s, first, count, block, 1);
    size_t width = wide ? 2 : 1, wb = count * width;
    float *x = harness_alloc_guarded(count * sizeof(float)), *y = harness_alloc_guarded(count * sizeof(float));
    float *res = harness_alloc_guarded(count * sizeof(float)), *res2 = harness_alloc_guarded(count * sizeof(float));
    float *out = harness_alloc_guarded(count * sizeof(float)), *out2 = harness_alloc_guarded(count * sizeof(float));
    unsigned char *w = harness_alloc_guarded(wb), *w2 = harness_alloc_guarded(wb), *sum = harness_alloc_guarded(wb), *sum2 = harness_alloc_guarded(wb);
    fill_input(x, count, 1);
    fill_input(y, count, 1);
    shoal_codec_simd_enable(simd);
    shoal_codec_t c = make_codec(block, wide, SHOAL_ROUND_STOCHASTIC, 5, 77, s.scales);
    shoal_codec_t d = make_codec(block, wide, SHOAL_ROUND_STOCHASTIC, 6, 77, s.scales);

    c.ops->encode(&c, w, x, NULL, res, count, first);
    c.ops->encode(&c, w2, x, NULL, res2, count, first);
    check_bytes(w2, w, wb, what);
    check_bytes(res2, res, count * sizeof(float), what);
    if (count >= 1000) {
        c.step++;
        c.ops->encode(&c, w2, x, NULL, NULL, count, first);
        assert_true(memcmp(w, w2, wb) != 0);
        c.step--;
    }
    d.ops->add_encode(&d, sum, w, y, NULL, res, count, first);
    d.ops->decode(&d, out, sum, count, first);

    static const size_t steps[] = {1, 7, 32, 100, 192, 1000};
    for (size_t si = 0; si < sizeof(steps) / sizeof(steps[0]); si++) {
        size_t piece = steps[si] * (si % 2 ? 1 : block);
        memset(w2, 0, wb);
        memset(sum2, 0, wb);
        for (size_t at = 0; at < count; at += piece) {
            size_t n = count - at < piece ? count - at : piece;
            c.ops->encode(&c, w2 + at * width, x + at, NULL, res2 + at, n, first + at);
            d.ops->add_encode(&d, sum2 + at * width, w2 + at * width, y + at, NULL, res2 + at, n,
                              first + at);
            d.ops->decode(&d, out2 + at, sum2 + at * width, n, first + at);
        }
        check_bytes(w2, w, wb, what);
        check_bytes(sum2, sum, wb, what);
        check_bytes(res2, res, count * sizeof(float), what);
        check_bytes(out2, out, count * sizeof(float), what);
    }
    shoal_codec_simd_enable(1);
    free(x);
    free(y);
    free(res);
    free(res2);
    free(out);
    free(out2);
    free(w);
    free(w2);
    free(sum);
    free(sum2);
    scales_free(&s);
}

static void test_pieces(void **state)
{
    for (int simd = 0; simd < 2; simd++)
        for (size_t ci = 0; ci < NCOUNTS; ci++)
            for (size_t bi = 0; bi < NBLOCKS; bi++)
                for (int wide = 0; wide < 2; wide++)
                    if (counts[ci] < BIG_COUNT || (bi == 1 && !wide))
                        check_pieces(counts[ci], blocks[bi], firsts[(ci + bi) % NFIRSTS],
                                     wide, simd);
}

/* ---- the scale helpers ---- */

static void test_block_absmax(void **state)
{
    for (int simd = 0; simd < 2; simd++)
        for (size_t ci = 0; ci < NCOUNTS; ci++)
            for (size_t bi = 0; bi < NBLOCKS; bi++) {
                size_t count = counts[ci], block = blocks[bi];
                size_t nb = (count + block - 1) / block;
                float *x = harness_alloc_guarded(count * sizeof(float));
                float *out = harness_alloc_guarded(nb * sizeof(float));
                fill_input(x, count, 1);
                if (count > 3 * block) /* a block of NaN and zeros only */
                    for (size_t i = 2 * block; i < 3 * block; i++)
                        x[i] = i % 2 ? NAN : -0.0f;
                shoal_codec_simd_enable(simd);
                shoal_codec_block_absmax(out, x, count, block);
                for (size_t b = 0; b < nb; b++) {
                    float m = 0.0f;
                    for (size_t i = b * block; i < count && i < (b + 1) * block; i++)
                        if (!isnan(x[i]))
                            m = fmaxf(m, fabsf(x[i]));
                    if (memcmp(&m, &out[b], sizeof(m)) != 0)
                        fail_msg("absmax count %zu block %zu simd %d: block %zu: %a, want %a",
                                 count, block, simd, b, out[b], m);
                }
                harness_assert_guard(out, nb * sizeof(float), "absmax");
                free(x);
                free(out);
            }
    shoal_codec_simd_enable(1);
}

static void test_clip_bound(void **state)
{
    for (size_t ci = 0; ci < NCOUNTS; ci++) {
        size_t count = counts[ci];
        float *x = harness_alloc_guarded(count * sizeof(float));
        for (size_t i = 0; i < count; i++)
            x[i] = 10.0f + rng_float(3.0f); /* a mean far from 0 */
        long double mean = 0.0L, var = 0.0L;
        for (size_t i = 0; i < count; i++)
            mean += x[i];
        mean /= count ? (long double)count : 1.0L;
        for (size_t i = 0; i < count; i++)
            var += (x[i] - mean) * (x[i] - mean);
        double want = count ? 2.5 * sqrt((double)(var / (long double)count)) : 0.0;
        float got = shoal_codec_clip_bound(x, count, 2.5f);
        if (fabs(got - want) > 1e-6 * want)
            fail_msg("clip bound of %zu values: %.9g, want %.9g", count, got, want);
        assert_true(shoal_codec_clip_bound(x, count, 0.0f) == 0.0f);
        assert_true(shoal_codec_clip_bound(x, count, -1.0f) == 0.0f);
        free(x);
    }
    const float constant[3] = {4.0f, 4.0f, 4.0f}, bad[3] = {1.0f, NAN, 2.0f};
    const float inf[2] = {INFINITY, 1.0f}, two[2] = {-1.0f, 1.0f};
    assert_true(shoal_codec_clip_bound(constant, 3, 3.0f) == 0.0f);
    assert_true(shoal_codec_clip_bound(bad, 3, 3.0f) == 0.0f);
    assert_true(shoal_codec_clip_bound(inf, 2, 3.0f) == 0.0f);
    assert_true(shoal_codec_clip_bound(two, 2, 3.0f) == 3.0f);
    assert_true(shoal_codec_clip_bound(two, 2, NAN) == 0.0f);

    /* Clipping as documented: scale = min(block max, bound), and a value
     * beyond it goes out as +-scale with the rest in the residual. */
    float y[64], scale, res[64];
    int8_t wire[64];
    for (size_t i = 0; i < 64; i++)
        y[i] = rng_float(1.0f);
    y[10] = 50.0f;
    float bound = shoal_codec_clip_bound(y, 64, 2.0f);
    shoal_codec_block_absmax(&scale, y, 64, 64);
    assert_true(scale == 50.0f && bound > 0.0f && bound < 50.0f);
    scale = fminf(scale, bound);
    shoal_codec_t c = make_codec(64, 0, SHOAL_ROUND_STOCHASTIC, 3, 0, &scale);
    c.ops->encode(&c, wire, y, NULL, res, 64, 0);
    assert_int_equal(wire[10], 1);
    assert_true(res[10] == 50.0f - scale);
}

/* ---- error feedback fused: the addend ---- */

/* One count, block, first, width and rounding, by both paths: encode and
 * add_encode with an addend against the scalar reference of the unfused
 * pass (the fp32 sum x + addend made first, encoded without one): the same
 * wire and residual bit for bit, with the residual apart and in place
 * (residual == addend); and decode(wire) + residual == x + addend up to
 * the rounding of the residual's subtraction (add_encode: the part of the
 * wire this rank added). wire: 0 8-bit, 1 16-bit, 2 packed. */
static void check_addend_case(size_t count, size_t block, size_t first, int wire,
                              shoal_round_t round)
{
    char what[200];
    snprintf(what, sizeof(what), "addend: count %zu block %zu first %zu wire %d round %d", count,
             block, first, wire, (int)round);
    scales_t s;
    scales_init(&s, first, count, block, 1);
    shoal_codec_t c = make_codec(block, wire == 1, round, 21, 5, s.scales);
    c.packed = wire == 2;
    size_t wb = c.ops->wire_bytes(&c, count), fb = count * sizeof(float);
    float *x = malloc(fb + 4), *add = malloc(fb + 4), *sum = malloc(fb + 4);
    float *res_ref = malloc(fb + 4), *res = malloc(fb + 4), *dec = malloc(fb + 4);
    unsigned char *in = malloc(wb + 1), *ref = malloc(wb + 1), *got = malloc(wb + 1);
    assert_true(x && add && sum && res_ref && res && dec && in && ref && got);
    fill_input(x, count, 0);
    for (size_t i = 0; i < count; i++)
        add[i] = 0.25f * rng_float(1.0f);
    for (size_t i = 0; i < count; i++)
        sum[i] = x[i] + add[i];
    /* An incoming wire of sums within +-3, which every width holds. */
    memset(in, 0, wb + 1);
    for (size_t i = 0; i < count; i++) {
        int v = (int)(rng_next() % 7) - 3;
        if (wire == 1) {
            int16_t h = (int16_t)v;
            memcpy(in + 2 * i, &h, sizeof(h));
        } else if (wire == 0) {
            in[i] = (unsigned char)(int8_t)v;
        } else {
            in[i / 2] |= (unsigned char)((v & 0xf) << (i % 2 ? 4 : 0));
        }
    }
    for (int op = 0; op < 2; op++) {
        shoal_codec_simd_enable(0);
        if (op == 0)
            c.ops->encode(&c, ref, sum, NULL, res_ref, count, first);
        else
            c.ops->add_encode(&c, ref, in, sum, NULL, res_ref, count, first);
        for (int simd = 0; simd <= 1; simd++) {
            shoal_codec_simd_enable(simd);
            for (int inplace = 0; inplace <= 1; inplace++) {
                float *r = res;
                const float *a = add;
                if (inplace) {
                    memcpy(res, add, fb);
                    a = res;
                }
                if (op == 0)
                    c.ops->encode(&c, got, x, a, r, count, first);
                else
                    c.ops->add_encode(&c, got, in, x, a, r, count, first);
                check_bytes(got, ref, wb, what);
                check_bytes(res, res_ref, fb, what);
            }
        }
        /* The identity: what this rank's codes add, decoded, plus its
         * residual is its value (up to the roundings of the decodes and
         * of their difference). */
        shoal_codec_simd_enable(1);
        c.ops->decode(&c, dec, ref, count, first);
        if (op == 1) {
            c.ops->decode(&c, res, in, count, first);
            for (size_t i = 0; i < count; i++)
                dec[i] -= res[i];
        }
        for (size_t i = 0; i < count; i++) {
            double gap = fabs((double)dec[i] + res_ref[i] - sum[i]);
            if (gap > 0x1p-20 * (fabs((double)res_ref[i]) + fabs((double)dec[i]) +
                                 fabs((double)sum[i])))
                fail_msg("%s op %d: value %zu: decoded %.9g + residual %.9g != %.9g", what, op,
                         i, dec[i], res_ref[i], sum[i]);
        }
    }
    shoal_codec_simd_enable(1);
    scales_free(&s);
    free(x);
    free(add);
    free(sum);
    free(res_ref);
    free(res);
    free(dec);
    free(in);
    free(ref);
    free(got);
}

static void test_addend(void **state)
{
    (void)state;
    for (size_t j = 0; j < NCOUNTS; j++)
        for (size_t b = 0; b < NBLOCKS; b++)
            for (size_t f = 0; f < NFIRSTS; f++)
                for (int w = 0; w < 3; w++)
                    for (int r = 0; r < 2; r++)
                        check_addend_case(counts[j], blocks[b], firsts[f], w,
                                          r ? SHOAL_ROUND_NEAREST : SHOAL_ROUND_STOCHASTIC);
}

/* ---- kernels against the scalar reference ---- */

/* mode 0: out of place; 1: in place (add_encode's wire_out == wire_in,
 * residual == src). Pointers start one byte or one float off alignment
 * now and then. */
static void check_simd_case(size_t count, size_t block, size_t first, int wide,
                            shoal_round_t round, int with_res, int mode, int off)
{
    char what[200];
    snprintf(what, sizeof(what),
             "simd: count %zu block %zu first %zu wide %d round %d res %d mode %d off %d",
             count, block, first, wide, (int)round, with_res, mode, off);
    scales_t s;
    scales_init(&s, first, count, block, 1);
    size_t width = wide ? 2 : 1, wb = count * width, fb = count * sizeof(float);
    shoal_codec_t c = make_codec(block, wide, round, 11, 13, s.scales);
    float *x0 = harness_alloc_guarded(fb + 4), *y0 = harness_alloc_guarded(fb + 4);
    unsigned char *in0 = harness_alloc_guarded(wb + 1);
    /* one float off for the floats, one byte off for the wire */
    float *x = x0 + off, *y = y0 + off;
    unsigned char *in = in0 + off;
    fill_input(x, count, 1);
    fill_input(y, count, 1);
    for (size_t i = 0; i < wb; i++)
        in[i] = (unsigned char)rng_next(); /* any sums, saturating ones too */
    float *xs[2], *ys[2], *rx[2], *ry[2], *out[2];
    unsigned char *w[2], *sum[2];
    for (int simd = 0; simd < 2; simd++) {
        shoal_codec_simd_enable(simd);
        xs[simd] = harness_alloc_guarded(fb + 4);
        ys[simd] = harness_alloc_guarded(fb + 4);
        xs[simd] += off;
        ys[simd] += off;
        memcpy(xs[simd], x, fb);
        memcpy(ys[simd], y, fb);
        rx[simd] = with_res ? (mode ? xs[simd] : harness_alloc_guarded(fb)) : NULL;
        ry[simd] = with_res ? (mode ? ys[simd] : harness_alloc_guarded(fb)) : NULL;
        w[simd] = (unsigned char *)harness_alloc_guarded(wb + 1) + off;
        sum[simd] = mode ? w[simd] : (unsigned char *)harness_alloc_guarded(wb + 1) + off;
        out[simd] = (float *)harness_alloc_guarded(fb + 4) + off;
        memset(w[simd], HARNESS_GUARD_BYTE, wb);
        memcpy(w[simd], in, wb);
        c.ops->encode(&c, w[simd], xs[simd], NULL, rx[simd], count, first);
        /* add onto the random wire, not onto the codes just made */
        memcpy(w[simd], in, wb);
        c.ops->add_encode(&c, sum[simd], w[simd], ys[simd], NULL, ry[simd], count, first);
        c.ops->decode(&c, out[simd], sum[simd], count, first);
    }
    shoal_codec_simd_enable(1);
    check_bytes(sum[1], sum[0], wb, what);
    check_bytes(out[1], out[0], fb, what);
    if (with_res) {
        check_bytes(rx[1], rx[0], fb, what);
        check_bytes(ry[1], ry[0], fb, what);
    }
    /* encode's own output, once more on its own */
    for (int simd = 0; simd < 2; simd++) {
        shoal_codec_simd_enable(simd);
        c.ops->encode(&c, w[simd], x, NULL, NULL, count, first);
    }
    shoal_codec_simd_enable(1);
    check_bytes(w[1], w[0], wb, what);
    for (int simd = 0; simd < 2; simd++) {
        harness_assert_guard(w[simd], wb, what);
        harness_assert_guard(sum[simd], wb, what);
        harness_assert_guard(out[simd], fb, what);
        harness_assert_guard(xs[simd], fb, what);
        harness_assert_guard(ys[simd], fb, what);
        if (with_res && !mode) {
            harness_assert_guard(rx[simd], fb, what);
            harness_assert_guard(ry[simd], fb, what);
            free(rx[simd]);
            free(ry[simd]);
        }
        if (!mode)
            free(sum[simd] - off);
        free(w[simd] - off);
        free(out[simd] - off);
        free(xs[simd] - off);
        free(ys[simd] - off);
    }
    free(x0);
    free(y0);
    free(in0);
    scales_free(&s);
}

/* The packed wire (4-bit codes) against the 8-bit one: a ring of 1..7 ranks
 * (encode, add_encode at each hop, decode) over both wires gives bitwise
 * the same decoded values and residuals, for every count (odd ones end in
 * half a byte), block, rounding and first; the packed wire is
 * (count + 1) / 2 bytes; packed with wide is invalid. */
static void test_packed(void **state)
{
    (void)state;
    size_t most = 4099;
    float *x = malloc(most * sizeof(float)), *d8 = malloc(most * sizeof(float));
    float *d4 = malloc(most * sizeof(float)), *r8 = malloc(most * sizeof(float));
    float *r4 = malloc(most * sizeof(float));
    unsigned char *w8 = malloc(most), *w4 = malloc(most / 2 + 1);
    assert_true(x && d8 && d4 && r8 && r4 && w8 && w4);
    for (size_t k = 0; k < NCOUNTS; k++) {
        size_t count = counts[k];
        if (count > most)
            continue;
        for (size_t b = 0; b < NBLOCKS; b++) {
            for (int rd = 0; rd < 2; rd++) {
                size_t first = firsts[(k + b) % NFIRSTS] / blocks[b] * blocks[b];
                scales_t sc;
                scales_init(&sc, first, count, blocks[b], 1);
                shoal_round_t round = rd ? SHOAL_ROUND_NEAREST : SHOAL_ROUND_STOCHASTIC;
                shoal_codec_t c8 = make_codec(blocks[b], 0, round, 9, k, sc.scales);
                shoal_codec_t c4 = c8;
                c4.packed = 1;
                assert_int_equal(c4.ops->wire_bytes(&c4, count), (count + 1) / 2);
                for (int n = 1; n <= 7; n++) {
                    for (int r = 0; r < n; r++) {
                        fill_input(x, count, 0);
                        c8.seed = c4.seed = 100 + (uint64_t)r;
                        if (r == 0) {
                            c8.ops->encode(&c8, w8, x, NULL, r8, count, first);
                            c4.ops->encode(&c4, w4, x, NULL, r4, count, first);
                        } else {
                            c8.ops->add_encode(&c8, w8, w8, x, NULL, r8, count, first);
                            c4.ops->add_encode(&c4, w4, w4, x, NULL, r4, count, first);
                        }
                        assert_memory_equal(r8, r4, count * sizeof(float));
                    }
                    c8.ops->decode(&c8, d8, w8, count, first);
                    c4.ops->decode(&c4, d4, w4, count, first);
                    assert_memory_equal(d8, d4, count * sizeof(float));
                }
                scales_free(&sc);
            }
        }
    }
    shoal_codec_t bad = make_codec(64, 1, SHOAL_ROUND_STOCHASTIC, 0, 0, NULL);
    bad.packed = 1;
    assert_int_equal(bad.ops->wire_bytes(&bad, 64), 0);
    free(x);
    free(d8);
    free(d4);
    free(r8);
    free(r4);
    free(w8);
    free(w4);
}

static void test_simd_matches_scalar(void **state)
{
    for (size_t ci = 0; ci + 1 < NCOUNTS; ci++)
        for (size_t bi = 0; bi < NBLOCKS; bi++)
            for (size_t fi = 0; fi < NFIRSTS; fi++)
                for (int wide = 0; wide < 2; wide++)
                    for (int round = 0; round < 2; round++)
                        for (int with_res = 0; with_res < 2; with_res++)
                            for (int mode = 0; mode < 2; mode++)
                                check_simd_case(counts[ci], blocks[bi], firsts[fi], wide,
                                                (shoal_round_t)round, with_res, mode,
                                                (int)(ci + fi) % 2);
    for (int wide = 0; wide < 2; wide++)
        for (int round = 0; round < 2; round++)
            check_simd_case(BIG_COUNT, 64, firsts[NFIRSTS - 1], wide, (shoal_round_t)round, 1,
                            0, wide);
}

/* The packed wire's bytes themselves: after a ring of 1..7 ranks, byte j
 * holds the 8-bit wire's codes 2j (low half) and 2j + 1 (high half) in
 * 4-bit two's complement, a lone last code with a high half of 0; and
 * every one of the 256 bytes
 * decodes to its two halves, sign-extended, times the scale. Counts start
 * at every offset of a 16-value run, odd and even, so that vector loops
 * meet their tails. */
static void test_packed_bytes(void **state)
{
    (void)state;
    size_t most = 4099;
    float *x = malloc(most * sizeof(float)), *d = malloc(512 * sizeof(float));
    unsigned char *w8 = malloc(most), *w4 = malloc(most / 2 + 1);
    assert_true(x && d && w8 && w4);
    for (size_t count = 1; count <= most; count += count < 40 ? 1 : 511) {
        scales_t sc;
        scales_init(&sc, 0, count, 32, 0);
        shoal_codec_t c8 = make_codec(32, 0, SHOAL_ROUND_NEAREST, 3, count, sc.scales);
        shoal_codec_t c4 = c8;
        c4.packed = 1;
        for (int n = 1; n <= 7; n++) {
            for (int r = 0; r < n; r++) {
                fill_input(x, count, 0);
                if (r == 0) {
                    c8.ops->encode(&c8, w8, x, NULL, NULL, count, 0);
                    c4.ops->encode(&c4, w4, x, NULL, NULL, count, 0);
                } else {
                    c8.ops->add_encode(&c8, w8, w8, x, NULL, NULL, count, 0);
                    c4.ops->add_encode(&c4, w4, w4, x, NULL, NULL, count, 0);
                }
            }
            for (size_t j = 0; j < (count + 1) / 2; j++) {
                int lo = (int8_t)w8[2 * j];
                int hi = 2 * j + 1 < count ? (int8_t)w8[2 * j + 1] : 0;
                assert_int_equal(w4[j], (unsigned)((lo & 0xf) | (hi & 0xf) << 4));
            }
        }
        scales_free(&sc);
    }
    /* Every byte: 512 values (16 blocks of 32) of one scale. */
    float scales[16];
    for (size_t b = 0; b < 16; b++)
        scales[b] = 0.25f;
    shoal_codec_t c4 = make_codec(32, 0, SHOAL_ROUND_NEAREST, 0, 0, scales);
    c4.packed = 1;
    for (int simd = 0; simd < 2; simd++) {
        shoal_codec_simd_enable(simd);
        for (int v = 0; v < 256; v++)
            w4[v] = (unsigned char)v;
        for (size_t cnt = 511; cnt <= 512; cnt++) {
            c4.ops->decode(&c4, d, w4, cnt, 0);
            for (size_t i = 0; i < cnt; i++) {
                int b = w4[i / 2], h = i % 2 ? b >> 4 : b & 0xf;
                int code = h >= 8 ? h - 16 : h;
                assert_true(d[i] == (float)code * 0.25f);
            }
        }
    }
    shoal_codec_simd_enable(1);
    free(x);
    free(d);
    free(w8);
    free(w4);
}

/* A failing case leaves by longjmp: restore the default for the next. */
static int simd_default(void **state)
{
    shoal_codec_simd_enable(1);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_table),
        cmocka_unit_test_teardown(test_codes, simd_default),
        cmocka_unit_test_teardown(test_scale_zero, simd_default),
        cmocka_unit_test_teardown(test_nearest, simd_default),
        cmocka_unit_test(test_unbiased),
        cmocka_unit_test_teardown(test_sums, simd_default),
        cmocka_unit_test_teardown(test_saturation, simd_default),
        cmocka_unit_test_teardown(test_pieces, simd_default),
        cmocka_unit_test_teardown(test_block_absmax, simd_default),
        cmocka_unit_test(test_clip_bound),
        cmocka_unit_test_teardown(test_simd_matches_scalar, simd_default),
        cmocka_unit_test_teardown(test_addend, simd_default),
        cmocka_unit_test_teardown(test_packed, simd_default),
        cmocka_unit_test_teardown(test_packed_bytes, simd_default),
    };
    return cmocka_run_group_tests_name("codec_ternary", tests, NULL, NULL);
}
