/* The int8 codec (src/compress/int8.c) against its definition: wire size
 * and layout, the error bound of both roundings, unbiased stochastic
 * rounding, determinism and piecewise encoding, exact residuals, a ring of
 * 1..8 ranks, NaN/inf/zero/huge/tiny blocks, and the SIMD kernels bit for
 * bit against the scalar reference on random data of every kind. */
#include "harness.h"

#include "compress/codec.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCALE_BYTES 4

static const size_t blocks[] = {32, 64, 128};
static const shoal_round_t rounds[] = {SHOAL_ROUND_NEAREST, SHOAL_ROUND_STOCHASTIC};
static const size_t counts[] = {0, 1, 31, 63, 64, 65, 127, 1000, 4099, (1u << 20) + 3};
#define NBLOCKS (sizeof(blocks) / sizeof(blocks[0]))
#define NROUNDS (sizeof(rounds) / sizeof(rounds[0]))
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))
#define MAX_COUNT ((1u << 20) + 3)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Uniform in [-1, 1). */
static float rng_signed(void)
{
    return (float)(int32_t)(rng_next() >> 40) * 0x1p-23f - 1.0f;
}

static shoal_codec_t make_codec(size_t block, shoal_round_t round, uint64_t seed, uint64_t step)
{
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = block, .round = round,
                       .seed = seed, .step = step};
    return c;
}

static size_t nblocks_of(size_t count, size_t block)
{
    return (count + block - 1) / block;
}

static float scale_at(const unsigned char *wire, size_t b)
{
    float s;
    memcpy(&s, wire + b * SCALE_BYTES, sizeof(s));
    return s;
}

static int8_t code_at(const unsigned char *wire, size_t count, size_t block, size_t i)
{
    return (int8_t)wire[nblocks_of(count, block) * SCALE_BYTES + i];
}

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static int same_bits(float a, float b)
{
    return bits_of(a) == bits_of(b);
}

/* The scale the definition gives for amax (finite). */
static float scale_of_amax(float amax)
{
    float s = amax / 127.0f;
    if (isinf(127.0f * s)) {
        uint32_t u = bits_of(s) - 1;
        memcpy(&s, &u, sizeof(s));
    }
    return s;
}

/* Error bounds of one value, from the top of int8.c: scale/2 (nearest) or
 * scale (stochastic), plus 2^-15 of scale for the fp32 roundings of scale,
 * inv = 127/amax, x * inv and code * scale (together under 4 * 127 * 2^-24
 * of scale), plus 2^-142 (= 128 * 2^-150) for blocks whose scale is
 * subnormal or 0, where its rounding costs up to 127.5 * 2^-150. */
static double err_bound(float scale, shoal_round_t round)
{
    double step = round == SHOAL_ROUND_NEAREST ? 0.5 : 1.0;
    return (double)scale * (step + 0x1p-15) + 0x1p-142;
}

/* Kinds of block in the random inputs. */
enum {
    KIND_PLAIN,   /* |x| < 2^e for an e of the block, in [-20, 20] */
    KIND_HALVES,  /* multiples of 1/2 with amax 127: scale 1, every tie */
    KIND_ZERO,    /* +0 and -0 */
    KIND_TINY,    /* subnormal and barely normal: scales subnormal or 0 */
    KIND_HUGE,    /* up to FLT_MAX */
    KIND_SPREAD,  /* magnitudes from 2^-40 to 1 in one block, some -0 */
    KIND_NONFINITE, /* plain with a NaN or an infinity somewhere */
    KIND_COUNT
};

static float draw(int kind, float e)
{
    switch (kind) {
    case KIND_HALVES: return (float)((int)(rng_next() % 509) - 254) * 0.5f;
    case KIND_ZERO: return rng_next() & 1 ? -0.0f : 0.0f;
    case KIND_TINY: return ldexpf(rng_signed(), -(int)(rng_next() % 30) - 120);
    case KIND_HUGE: return rng_signed() * FLT_MAX;
    case KIND_SPREAD: {
        uint64_t r = rng_next();
        return r % 8 == 0 ? -0.0f : ldexpf(rng_signed(), -(int)(r % 41));
    }
    default: return ldexpf(rng_signed(), (int)e);
    }
}

/* count values, block by block of a random kind (no non-finite ones unless
 * nonfinite). */
static void fill(float *x, size_t count, size_t block, int nonfinite)
{
    for (size_t base = 0; base < count; base += block) {
        size_t n = count - base < block ? count - base : block;
        int kind = (int)(rng_next() % (nonfinite ? KIND_COUNT : KIND_NONFINITE));
        float e = (float)((int)(rng_next() % 41) - 20);
        for (size_t i = 0; i < n; i++)
            x[base + i] = draw(kind, e);
        if (kind == KIND_HALVES)
            x[base + rng_next() % n] = rng_next() & 1 ? 127.0f : -127.0f;
        if (kind == KIND_HUGE && rng_next() % 2)
            x[base + rng_next() % n] = rng_next() & 1 ? FLT_MAX : -FLT_MAX;
        if (kind == KIND_NONFINITE) {
            static const float specials[] = {NAN, -NAN, INFINITY, -INFINITY};
            x[base + rng_next() % n] = specials[rng_next() % 4];
        }
    }
}

/* ---- wire size, ops table, invalid codecs ---- */

static void test_wire_bytes(void **state)
{
    (void)state;
    const shoal_codec_ops_t *ops = &shoal_codec_int8;
    assert_int_equal(ops->size, sizeof(shoal_codec_ops_t));
    assert_string_equal(ops->name, "int8");
    assert_non_null(ops->wire_bytes);
    assert_non_null(ops->encode);
    assert_non_null(ops->decode);
    assert_non_null(ops->add_encode);
    for (size_t k = 0; k < NBLOCKS; k++) {
        shoal_codec_t c = make_codec(blocks[k], SHOAL_ROUND_NEAREST, 0, 0);
        for (size_t j = 0; j < NCOUNTS; j++)
            assert_int_equal(ops->wire_bytes(&c, counts[j]),
                             nblocks_of(counts[j], blocks[k]) * SCALE_BYTES + counts[j]);
    }
    shoal_codec_t c = make_codec(64, SHOAL_ROUND_STOCHASTIC, 0, 0);
    assert_int_equal(ops->wire_bytes(&c, 0), 0);
    assert_int_equal(ops->wire_bytes(&c, 1), 5);
    assert_int_equal(ops->wire_bytes(&c, 64), 68);
    assert_int_equal(ops->wire_bytes(&c, 65), 73);
}

/* A codec with a block other than 32/64/128, or an unknown rounding, has
 * wire size 0 and its operations leave every buffer as it was. */
static void test_invalid_codec(void **state)
{
    (void)state;
    static const size_t bad_blocks[] = {0, 1, 16, 48, 96, 256};
    enum { N = 300 };
    float src[N], dst[N], res[N];
    unsigned char wire[2 * N];
    for (size_t i = 0; i < N; i++)
        src[i] = (float)i;
    for (size_t k = 0; k <= sizeof(bad_blocks) / sizeof(bad_blocks[0]); k++) {
        shoal_codec_t c = make_codec(64, SHOAL_ROUND_NEAREST, 0, 0);
        if (k < sizeof(bad_blocks) / sizeof(bad_blocks[0]))
            c.block = bad_blocks[k];
        else
            c.round = (shoal_round_t)7;
        assert_int_equal(c.ops->wire_bytes(&c, N), 0);
        for (int simd = 0; simd <= 1; simd++) {
            shoal_codec_simd_enable(simd);
            memset(wire, HARNESS_GUARD_BYTE, sizeof(wire));
            memset(dst, HARNESS_GUARD_BYTE, sizeof(dst));
            memset(res, HARNESS_GUARD_BYTE, sizeof(res));
            c.ops->encode(&c, wire, src, NULL, res, N, 0);
            c.ops->add_encode(&c, wire, wire, src, NULL, res, N, 0);
            c.ops->decode(&c, dst, wire, N, 0);
            for (size_t i = 0; i < sizeof(wire); i++)
                assert_int_equal(wire[i], HARNESS_GUARD_BYTE);
            for (size_t i = 0; i < sizeof(dst); i++) {
                assert_int_equal(((unsigned char *)dst)[i], HARNESS_GUARD_BYTE);
                assert_int_equal(((unsigned char *)res)[i], HARNESS_GUARD_BYTE);
            }
        }
    }
    shoal_codec_simd_enable(1);
}

/* ---- round trip ---- */

/* Encode with residuals and decode, in the current mode: every block's
 * scale is as defined, every value is within the bound of its scale, and
 * the residual is src - decode, bit for bit. */
static void check_roundtrip(size_t block, shoal_round_t round, size_t count, size_t first)
{
    char what[128];
    snprintf(what, sizeof(what), "block %zu %s count %zu first %zu", block,
             round == SHOAL_ROUND_NEAREST ? "nearest" : "stochastic", count, first);
    shoal_codec_t c = make_codec(block, round, 7, 3);
    size_t wb = c.ops->wire_bytes(&c, count);
    float *src = malloc(count * sizeof(float) + 1);
    float *res = harness_alloc_guarded(count * sizeof(float));
    float *dec = harness_alloc_guarded(count * sizeof(float));
    unsigned char *wire = harness_alloc_guarded(wb);
    assert_non_null(src);
    fill(src, count, block, 0);

    c.ops->encode(&c, wire, src, NULL, res, count, first);
    c.ops->decode(&c, dec, wire, count, first);
    harness_assert_guard(wire, wb, what);
    harness_assert_guard(res, count * sizeof(float), what);
    harness_assert_guard(dec, count * sizeof(float), what);

    for (size_t b = 0, base = 0; base < count; b++, base += block) {
        size_t n = count - base < block ? count - base : block;
        float amax = 0;
        for (size_t i = 0; i < n; i++)
            amax = fabsf(src[base + i]) > amax ? fabsf(src[base + i]) : amax;
        float scale = scale_at(wire, b);
        if (!same_bits(scale, scale_of_amax(amax)))
            fail_msg("%s: block %zu: scale %a, want %a (amax %a)", what, b, (double)scale,
                     (double)scale_of_amax(amax), (double)amax);
        double bound = err_bound(scale, round);
        for (size_t i = base; i < base + n; i++) {
            int8_t q = code_at(wire, count, block, i);
            if (q < -127)
                fail_msg("%s: value %zu: code -128", what, i);
            if (!same_bits(dec[i], (float)q * scale))
                fail_msg("%s: value %zu: decoded %a, code %d scale %a", what, i,
                         (double)dec[i], q, (double)scale);
            if (fabs((double)src[i] - (double)dec[i]) > bound)
                fail_msg("%s: value %zu: %a decodes to %a, off by more than %a", what, i,
                         (double)src[i], (double)dec[i], bound);
            if (!same_bits(res[i], src[i] - dec[i]))
                fail_msg("%s: value %zu: residual %a, want %a", what, i, (double)res[i],
                         (double)(src[i] - dec[i]));
        }
    }
    free(src);
    free(res);
    free(dec);
    free(wire);
}

static void check_roundtrip_all(shoal_round_t round)
{
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        for (size_t k = 0; k < NBLOCKS; k++)
            for (size_t j = 0; j < NCOUNTS; j++)
                check_roundtrip(blocks[k], round, counts[j], j % 2 ? 12345 : 0);
    }
    shoal_codec_simd_enable(1);
}

static void test_roundtrip_nearest(void **state)
{
    (void)state;
    check_roundtrip_all(SHOAL_ROUND_NEAREST);
}

static void test_roundtrip_stochastic(void **state)
{
    (void)state;
    check_roundtrip_all(SHOAL_ROUND_STOCHASTIC);
}

/* ---- stochastic rounding ---- */

/* The mean of decode over many steps of a fixed input is the input: value
 * i rounds up with probability f = frac(x / scale), so over S steps the
 * mean's standard error is scale * sqrt(f (1 - f) / S). Allowed: 5 standard
 * errors, plus 2^-14 of scale for the fp32 rounding of x / scale and the
 * 2^-24 resolution of u. The seeds are fixed, so the outcome is too. */
static void test_stochastic_unbiased(void **state)
{
    (void)state;
    enum { N = 256, STEPS = 4000 };
    static float src[N], dec[N];
    static double sum[N];
    static unsigned char wire[N * 2];
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        for (size_t k = 0; k < NBLOCKS; k++) {
            for (size_t i = 0; i < N; i++) {
                src[i] = ldexpf(rng_signed(), (int)(i / 64) * 3 - 4);
                sum[i] = 0;
            }
            int varied = 0;
            float first_dec = 0;
            for (uint64_t step = 0; step < STEPS; step++) {
                shoal_codec_t c = make_codec(blocks[k], SHOAL_ROUND_STOCHASTIC, 99, step);
                c.ops->encode(&c, wire, src, NULL, NULL, N, 777);
                c.ops->decode(&c, dec, wire, N, 777);
                for (size_t i = 0; i < N; i++)
                    sum[i] += dec[i];
                if (step == 0)
                    first_dec = dec[5];
                else if (dec[5] != first_dec)
                    varied = 1;
            }
            assert_true(varied);
            for (size_t i = 0; i < N; i++) {
                float scale = scale_at(wire, i / blocks[k]);
                double y = (double)src[i] / scale;
                double f = y - floor(y);
                double se = scale * sqrt(f * (1 - f) / STEPS);
                double mean = sum[i] / STEPS;
                double tol = 5 * se + scale * 0x1p-14;
                if (fabs(mean - src[i]) > tol)
                    fail_msg("block %zu value %zu: mean %.9g of input %.9g, off by %.3g > %.3g",
                             blocks[k], i, mean, (double)src[i], fabs(mean - src[i]), tol);
            }
        }
    }
    shoal_codec_simd_enable(1);
}

/* Values on the grid of the scale encode exactly whatever the rounding; a
 * tie goes to the even code with nearest. amax 127 makes the scale 1. */
static void test_grid_and_ties(void **state)
{
    (void)state;
    static const float in[] = {127, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3, -3, 126.5f,
                               -126.5f, 0.25f, 0.75f, -0.75f, 100, -127};
    static const int8_t want_nearest[] = {127, 0, 2, 2, 0, -2, -2, 3, -3, 126,
                                          -126, 0, 1, -1, 100, -127};
    enum { N = sizeof(in) / sizeof(in[0]) };
    float src[32] = {0}, res[32];
    unsigned char wire[SCALE_BYTES + 32];
    memcpy(src, in, sizeof(in));
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        shoal_codec_t c = make_codec(32, SHOAL_ROUND_NEAREST, 0, 0);
        c.ops->encode(&c, wire, src, NULL, res, 32, 0);
        assert_true(scale_at(wire, 0) == 1.0f);
        for (size_t i = 0; i < N; i++)
            if (code_at(wire, 32, 32, i) != want_nearest[i])
                fail_msg("nearest %g: code %d, want %d", (double)in[i], code_at(wire, 32, 32, i),
                         want_nearest[i]);
        /* Stochastic: integers exactly, halves either way. */
        for (uint64_t step = 0; step < 64; step++) {
            c = make_codec(32, SHOAL_ROUND_STOCHASTIC, 5, step);
            c.ops->encode(&c, wire, src, NULL, NULL, 32, 0);
            for (size_t i = 0; i < N; i++) {
                int8_t q = code_at(wire, 32, 32, i);
                if (in[i] == floorf(in[i]))
                    assert_int_equal(q, (int)in[i]);
                else
                    assert_true(q == (int)floorf(in[i]) || q == (int)floorf(in[i]) + 1);
            }
        }
    }
    shoal_codec_simd_enable(1);
}

/* ---- determinism and pieces ---- */

/* Encoding, add_encode and decode of a tensor in pieces (whole blocks but
 * the last, each with its own first) give the blocks of the whole call:
 * same scales, codes, residuals and decoded values. Twice the same call
 * gives the same bytes. */
static void test_pieces(void **state)
{
    (void)state;
    enum { N = 20000 + 17 };
    static const size_t bases[] = {0, 12345};
    float *src = malloc(N * sizeof(float)), *local = malloc(N * sizeof(float));
    float *res_w = malloc(N * sizeof(float)), *res_p = malloc(N * sizeof(float));
    float *dec_w = malloc(N * sizeof(float)), *dec_p = malloc(N * sizeof(float));
    unsigned char *wire_w = malloc(2 * N), *wire_w2 = malloc(2 * N), *wire_p = malloc(2 * N);
    unsigned char *wire_in = malloc(2 * N), *sum_w = malloc(2 * N);
    assert_true(src && local && res_w && res_p && dec_w && dec_p && wire_w && wire_w2 &&
                wire_p && wire_in && sum_w);
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        for (size_t k = 0; k < NBLOCKS; k++) {
            for (size_t r = 0; r < NROUNDS; r++) {
                for (size_t f = 0; f < 2; f++) {
                    size_t block = blocks[k], first = bases[f];
                    shoal_codec_t c = make_codec(block, rounds[r], 1234, 56);
                    fill(src, N, block, 1);
                    fill(local, N, block, 0);
                    size_t wb = c.ops->wire_bytes(&c, N);
                    c.ops->encode(&c, wire_w, src, NULL, res_w, N, first);
                    c.ops->encode(&c, wire_w2, src, NULL, NULL, N, first);
                    assert_memory_equal(wire_w, wire_w2, wb);
                    /* The sum of that with local, whole. */
                    memcpy(wire_in, wire_w, wb);
                    c.ops->add_encode(&c, sum_w, wire_in, local, NULL, NULL, N, first);

                    size_t nb = nblocks_of(N, block);
                    for (size_t off = 0; off < N;) {
                        size_t len = block * (1 + rng_next() % 40);
                        len = len < N - off ? len : N - off;
                        size_t pb = nblocks_of(len, block), b0 = off / block;
                        /* encode */
                        c.ops->encode(&c, wire_p, src + off, NULL, res_p + off, len, first + off);
                        assert_memory_equal(wire_p, wire_w + b0 * SCALE_BYTES, pb * SCALE_BYTES);
                        assert_memory_equal(wire_p + pb * SCALE_BYTES,
                                            wire_w + nb * SCALE_BYTES + off, len);
                        /* decode */
                        c.ops->decode(&c, dec_p + off, wire_p, len, first + off);
                        /* add_encode of the piece, in place */
                        c.ops->add_encode(&c, wire_p, wire_p, local + off, NULL, NULL, len,
                                          first + off);
                        assert_memory_equal(wire_p, sum_w + b0 * SCALE_BYTES, pb * SCALE_BYTES);
                        assert_memory_equal(wire_p + pb * SCALE_BYTES,
                                            sum_w + nb * SCALE_BYTES + off, len);
                        off += len;
                    }
                    c.ops->decode(&c, dec_w, wire_w, N, first);
                    assert_memory_equal(res_p, res_w, N * sizeof(float));
                    assert_memory_equal(dec_p, dec_w, N * sizeof(float));
                }
            }
        }
    }
    shoal_codec_simd_enable(1);
    free(src);
    free(local);
    free(res_w);
    free(res_p);
    free(dec_w);
    free(dec_p);
    free(wire_w);
    free(wire_w2);
    free(wire_p);
    free(wire_in);
    free(sum_w);
}

/* The stream depends on seed, step and the value's index, and on nothing
 * else: other steps and seeds give other codes. */
static void test_stream_inputs(void **state)
{
    (void)state;
    enum { N = 1024 };
    static float src[N];
    static unsigned char a[2 * N], b[2 * N];
    for (size_t i = 0; i < N; i++)
        src[i] = rng_signed();
    shoal_codec_t c = make_codec(64, SHOAL_ROUND_STOCHASTIC, 1, 1);
    size_t wb = c.ops->wire_bytes(&c, N);
    c.ops->encode(&c, a, src, NULL, NULL, N, 0);
    c.step = 2;
    c.ops->encode(&c, b, src, NULL, NULL, N, 0);
    assert_memory_not_equal(a, b, wb);
    c.step = 1;
    c.seed = 2;
    c.ops->encode(&c, b, src, NULL, NULL, N, 0);
    assert_memory_not_equal(a, b, wb);
    c.seed = 1;
    c.ops->encode(&c, b, src, NULL, NULL, N, 64);
    assert_memory_not_equal(a, b, wb);
    c.ops->encode(&c, b, src, NULL, NULL, N, 0);
    assert_memory_equal(a, b, wb);
}

/* ---- a ring of ranks ---- */

/* Ranks 0..n-1 in a chain, as a reduce-scatter's pipeline runs it: rank 0
 * encodes its input, each next rank add_encodes its own into what came in
 * (in place on odd ranks, into a second buffer on even ones), and the last
 * wire is decoded. Rank r rounds with seed r + 1.
 * - Each residual is what its hop lost: res_r = s_r - dec_r in fp32,
 *   with s_r = dec_{r-1} + local_r.
 * - The reduction's error is the sum of residuals: sum local - sum res =
 *   result, up to the fp32 roundings of each hop, which are not part of any
 *   residual: that of s_r (at most 2^-24 |s_r|) and that of s_r - dec_r (at
 *   most 2^-24 scale_r, and 0 when s_r and dec_r are within a factor 2 of
 *   each other, as with nearest). Allowed: 2^-23 sum_r (|s_r| + scale_r),
 *   twice that.
 * - result is within n * max_scale / 2 (nearest, n * max_scale stochastic)
 *   of the exact sum, with the fp32 slack of err_bound per hop and the
 *   roundings above. */
static void check_ring(int nranks, size_t block, shoal_round_t round, size_t count)
{
    char what[128];
    snprintf(what, sizeof(what), "ring n %d block %zu %s count %zu", nranks, block,
             round == SHOAL_ROUND_NEAREST ? "nearest" : "stochastic", count);
    shoal_codec_t c0 = make_codec(block, round, 0, 11);
    size_t wb = c0.ops->wire_bytes(&c0, count);
    float *local[8], *res[8];
    unsigned char *wire[2] = {malloc(wb), malloc(wb)};
    float *dec = malloc(count * sizeof(float)), *s = malloc(count * sizeof(float));
    double *slack = calloc(count, sizeof(double)), *errsum = calloc(count, sizeof(double));
    assert_true(wire[0] && wire[1] && dec && s && slack && errsum);
    for (int r = 0; r < nranks; r++) {
        local[r] = malloc(count * sizeof(float));
        res[r] = malloc(count * sizeof(float));
        assert_true(local[r] && res[r]);
        for (size_t i = 0; i < count; i++)
            local[r][i] = ldexpf(rng_signed(), r - 4 + (int)(i % 7));
    }

    int cur = 0;
    for (int r = 0; r < nranks; r++) {
        shoal_codec_t c = make_codec(block, round, (uint64_t)r + 1, 11);
        if (r == 0) {
            memcpy(s, local[0], count * sizeof(float));
            c.ops->encode(&c, wire[cur], local[0], NULL, res[0], count, 0);
        } else {
            for (size_t i = 0; i < count; i++)
                s[i] = dec[i] + local[r][i];
            int out = r % 2 ? cur : 1 - cur;
            c.ops->add_encode(&c, wire[out], wire[cur], local[r], NULL, res[r], count, 0);
            cur = out;
        }
        c.ops->decode(&c, dec, wire[cur], count, 0);
        for (size_t i = 0; i < count; i++) {
            float scale = scale_at(wire[cur], i / block);
            if (!same_bits(res[r][i], s[i] - dec[i]))
                fail_msg("%s: rank %d value %zu: residual %a, want %a", what, r, i,
                         (double)res[r][i], (double)(s[i] - dec[i]));
            slack[i] += 0x1p-23 * (fabs((double)s[i]) + scale);
            errsum[i] += err_bound(scale, round);
        }
    }
    for (size_t i = 0; i < count; i++) {
        double exact = 0, lost = 0;
        for (int r = 0; r < nranks; r++) {
            exact += local[r][i];
            lost += res[r][i];
        }
        if (fabs(exact - lost - dec[i]) > slack[i])
            fail_msg("%s: value %zu: sum %.9g - residuals %.9g = %.9g, result %.9g (tol %.3g)",
                     what, i, exact, lost, exact - lost, (double)dec[i], slack[i]);
        if (fabs(exact - dec[i]) > errsum[i] + slack[i])
            fail_msg("%s: value %zu: result %.9g, exact %.9g, off by more than %.3g", what, i,
                     (double)dec[i], exact, errsum[i] + slack[i]);
    }
    for (int r = 0; r < nranks; r++) {
        free(local[r]);
        free(res[r]);
    }
    free(wire[0]);
    free(wire[1]);
    free(dec);
    free(s);
    free(slack);
    free(errsum);
}

static void test_ring(void **state)
{
    (void)state;
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        for (int n = 1; n <= 8; n++)
            for (size_t k = 0; k < NBLOCKS; k++)
                for (size_t r = 0; r < NROUNDS; r++) {
                    check_ring(n, blocks[k], rounds[r], 1000);
                    check_ring(n, blocks[k], rounds[r], 4099);
                }
    }
    shoal_codec_simd_enable(1);
}

/* ---- SIMD kernels against the scalar reference ---- */

/* One count, first and rounding: encode (with and without residuals), add
 * encode (out of place and in place) and decode, by both paths, on inputs
 * with every kind of block, non-finite ones included, and a wire at an odd
 * address. Every output must match bit for bit. */
static void check_simd_case(size_t block, shoal_round_t round, size_t count, size_t first,
                            float *src, float *local, float *out[2], float *res[2],
                            unsigned char *wire[2], unsigned char *sum[2])
{
    char what[160];
    snprintf(what, sizeof(what), "block %zu %s count %zu first %zu", block,
             round == SHOAL_ROUND_NEAREST ? "nearest" : "stochastic", count, first);
    shoal_codec_t c = make_codec(block, round, 31337, 4);
    size_t wb = c.ops->wire_bytes(&c, count), fb = count * sizeof(float);
    fill(src, count, block, 1);
    fill(local, count, block, 1);
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        memset(wire[simd], HARNESS_GUARD_BYTE, wb + HARNESS_GUARD);
        memset(res[simd], HARNESS_GUARD_BYTE, fb + HARNESS_GUARD);
        c.ops->encode(&c, wire[simd], src, NULL, res[simd], count, first);
        harness_assert_guard(wire[simd], wb, what);
        harness_assert_guard(res[simd], fb, what);
    }
    assert_memory_equal(wire[0], wire[1], wb);
    assert_memory_equal(res[0], res[1], fb);

    /* Without residuals: the same wire. */
    c.ops->encode(&c, sum[1], src, NULL, NULL, count, first);
    assert_memory_equal(sum[1], wire[0], wb);

    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        memset(out[simd], HARNESS_GUARD_BYTE, fb + HARNESS_GUARD);
        c.ops->decode(&c, out[simd], wire[simd], count, first);
        harness_assert_guard(out[simd], fb, what);
    }
    assert_memory_equal(out[0], out[1], fb);

    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        memset(sum[simd], HARNESS_GUARD_BYTE, wb + HARNESS_GUARD);
        c.ops->add_encode(&c, sum[simd], wire[simd], local, NULL, res[simd], count, first);
        harness_assert_guard(sum[simd], wb, what);
    }
    assert_memory_equal(sum[0], sum[1], wb);
    assert_memory_equal(res[0], res[1], fb);

    /* In place, without residuals: the same as out of place. */
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        c.ops->add_encode(&c, wire[simd], wire[simd], local, NULL, NULL, count, first);
        assert_memory_equal(wire[simd], sum[0], wb);
    }
}

static void test_simd_matches_ref(void **state)
{
    (void)state;
    static const size_t firsts[] = {0, 12345, (size_t)((1ull << 32) - 100)};
    size_t nfirsts = SIZE_MAX > UINT32_MAX ? 3 : 2;
    float *src = malloc(MAX_COUNT * sizeof(float)), *local = malloc(MAX_COUNT * sizeof(float));
    float *out[2], *res[2];
    unsigned char *wire[2], *sum[2];
    assert_true(src && local);
    for (int i = 0; i < 2; i++) {
        out[i] = harness_alloc_guarded(MAX_COUNT * sizeof(float));
        res[i] = harness_alloc_guarded(MAX_COUNT * sizeof(float));
        /* An odd address: the wire has no alignment. */
        wire[i] = (unsigned char *)harness_alloc_guarded(2 * MAX_COUNT + 1) + 1;
        sum[i] = (unsigned char *)harness_alloc_guarded(2 * MAX_COUNT + 1) + 1;
    }
    for (size_t k = 0; k < NBLOCKS; k++)
        for (size_t r = 0; r < NROUNDS; r++)
            for (size_t j = 0; j < NCOUNTS; j++)
                for (size_t f = 0; f < nfirsts; f++)
                    check_simd_case(blocks[k], rounds[r], counts[j], firsts[f], src, local, out,
                                    res, wire, sum);
    shoal_codec_simd_enable(1);
    free(src);
    free(local);
    for (int i = 0; i < 2; i++) {
        free(out[i]);
        free(res[i]);
        free(wire[i] - 1);
        free(sum[i] - 1);
    }
}

/* ---- error feedback fused: the addend ---- */

/* One count, first and rounding, by both paths (SIMD and reference):
 * encode and add_encode with an addend against the scalar reference of the
 * unfused pass, the sum src + addend made first in fp32 and encoded
 * without one: the same wire and residual, bit for bit, with the residual
 * apart and in place (residual == addend). And the identity of error
 * feedback, value by value in finite blocks: decode(wire) + residual ==
 * src + addend (add_encode: decode(wire_out) + residual ==
 * decode(wire_in) + local + addend), up to the rounding of the residual's
 * one subtraction. */
static void check_addend_case(size_t block, shoal_round_t round, size_t count, size_t first,
                              float *buf[6], unsigned char *wire[3])
{
    float *src = buf[0], *add = buf[1], *x = buf[2], *res_ref = buf[3], *res = buf[4];
    float *dec = buf[5];
    unsigned char *ref = wire[0], *got = wire[1], *in = wire[2];
    shoal_codec_t c = make_codec(block, round, 4242, 9);
    size_t wb = c.ops->wire_bytes(&c, count), fb = count * sizeof(float);
    fill(src, count, block, 1);
    fill(add, count, block, 1);
    for (size_t i = 0; i < count; i++)
        x[i] = src[i] + add[i];
    /* The reference of the unfused pass: the scalar codec on the sum. */
    shoal_codec_simd_enable(0);
    c.ops->encode(&c, ref, x, NULL, res_ref, count, first);
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        c.ops->encode(&c, got, src, add, res, count, first);
        assert_memory_equal(got, ref, wb);
        assert_memory_equal(res, res_ref, fb);
        memcpy(res, add, fb);
        c.ops->encode(&c, got, src, res, res, count, first);
        assert_memory_equal(got, ref, wb);
        assert_memory_equal(res, res_ref, fb);
    }
    c.ops->decode(&c, dec, ref, count, first);
    for (size_t i = 0; i < count; i++) {
        if (!isfinite(res_ref[i]) || !isfinite(x[i]))
            continue;
        double gap = fabs((double)dec[i] + res_ref[i] - x[i]);
        assert_true(gap <= 0x1p-24 * fabs((double)res_ref[i]));
    }

    /* add_encode onto an incoming wire of other values. */
    fill(x, count, block, 0);
    shoal_codec_simd_enable(0);
    c.ops->encode(&c, in, x, NULL, NULL, count, first);
    c.ops->decode(&c, dec, in, count, first);
    for (size_t i = 0; i < count; i++)
        x[i] = src[i] + add[i];
    c.ops->add_encode(&c, ref, in, x, NULL, res_ref, count, first);
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        c.ops->add_encode(&c, got, in, src, add, res, count, first);
        assert_memory_equal(got, ref, wb);
        assert_memory_equal(res, res_ref, fb);
        memcpy(res, add, fb);
        memcpy(got, in, wb);
        c.ops->add_encode(&c, got, got, src, res, res, count, first);
        assert_memory_equal(got, ref, wb);
        assert_memory_equal(res, res_ref, fb);
    }
    c.ops->decode(&c, x, ref, count, first);
    for (size_t i = 0; i < count; i++) {
        float s = dec[i] + (src[i] + add[i]);
        if (!isfinite(res_ref[i]) || !isfinite(s))
            continue;
        double gap = fabs((double)x[i] + res_ref[i] - s);
        assert_true(gap <= 0x1p-24 * fabs((double)res_ref[i]));
    }
}

static void test_addend(void **state)
{
    (void)state;
    static const size_t firsts[] = {0, 4096 + 64, (size_t)((1ull << 32) - 100)};
    size_t nfirsts = SIZE_MAX > UINT32_MAX ? 3 : 2;
    float *buf[6];
    unsigned char *wire[3];
    for (int i = 0; i < 6; i++) {
        buf[i] = malloc(MAX_COUNT * sizeof(float));
        assert_non_null(buf[i]);
    }
    for (int i = 0; i < 3; i++) {
        wire[i] = malloc(2 * MAX_COUNT);
        assert_non_null(wire[i]);
    }
    for (size_t k = 0; k < NBLOCKS; k++)
        for (size_t r = 0; r < NROUNDS; r++)
            for (size_t j = 0; j < NCOUNTS; j++)
                for (size_t f = 0; f < nfirsts; f++)
                    check_addend_case(blocks[k], rounds[r], counts[j], firsts[f], buf, wire);
    shoal_codec_simd_enable(1);
    for (int i = 0; i < 6; i++)
        free(buf[i]);
    for (int i = 0; i < 3; i++)
        free(wire[i]);
}

/* ---- special values ---- */

static void encode_decode(shoal_codec_t *c, const float *src, size_t n, unsigned char *wire,
                          float *res, float *dec)
{
    c->ops->encode(c, wire, src, NULL, res, n, 0);
    c->ops->decode(c, dec, wire, n, 0);
}

/* All-zero blocks (with -0) have scale 0, codes 0 and decode to +0; -0 in
 * another block decodes to +0 too; the residual keeps -0 - 0 = -0. */
static void test_zeros(void **state)
{
    (void)state;
    float src[96], res[96], dec[96];
    unsigned char wire[3 * SCALE_BYTES + 96];
    for (size_t i = 0; i < 96; i++)
        src[i] = i % 2 ? -0.0f : 0.0f;
    src[70] = 3.0f; /* the third block is not all zero */
    for (int simd = 0; simd <= 1; simd++) {
        for (size_t r = 0; r < NROUNDS; r++) {
            shoal_codec_simd_enable(simd);
            shoal_codec_t c = make_codec(32, rounds[r], 1, 1);
            encode_decode(&c, src, 96, wire, res, dec);
            assert_true(same_bits(scale_at(wire, 0), 0.0f));
            assert_true(same_bits(scale_at(wire, 1), 0.0f));
            assert_true(scale_at(wire, 2) == 3.0f / 127.0f);
            for (size_t i = 0; i < 96; i++) {
                if (i == 70)
                    continue;
                assert_int_equal(code_at(wire, 96, 32, i), 0);
                assert_true(same_bits(dec[i], 0.0f));
                assert_true(same_bits(res[i], src[i]));
            }
            assert_int_equal(code_at(wire, 96, 32, 70), 127);
        }
    }
    shoal_codec_simd_enable(1);
}

/* Huge blocks stay finite: 127 * scale does not overflow even for FLT_MAX,
 * whose scale is then one ulp below FLT_MAX / 127. Tiny blocks: a subnormal
 * scale still quantises (within the bound with its absolute slack), and a
 * block below 127 * 2^-150 has scale 0. */
static void test_huge_and_tiny(void **state)
{
    (void)state;
    enum { N = 64 };
    float src[N], res[N], dec[N];
    unsigned char wire[SCALE_BYTES + N];
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        for (size_t r = 0; r < NROUNDS; r++) {
            shoal_codec_t c = make_codec(N, rounds[r], 3, 3);
            for (int t = 0; t < 5; t++) {
                float amax = t == 0   ? FLT_MAX
                             : t == 1 ? 1e38f
                             : t == 2 ? 1e-38f /* scale subnormal */
                             : t == 3 ? 0x1p-140f
                                      : 0x1p-144f; /* scale 0 */
                for (size_t i = 0; i < N; i++)
                    src[i] = amax * ((float)((int)i - 32) / 32.0f);
                src[0] = -amax;
                src[N - 1] = amax;
                encode_decode(&c, src, N, wire, res, dec);
                float scale = scale_at(wire, 0);
                assert_true(same_bits(scale, scale_of_amax(amax)));
                assert_true(isfinite(127.0f * scale));
                if (t == 4)
                    assert_true(scale == 0.0f);
                for (size_t i = 0; i < N; i++) {
                    if (!isfinite(dec[i]))
                        fail_msg("amax %a: value %zu decodes to %a", (double)amax, i,
                                 (double)dec[i]);
                    if (fabs((double)src[i] - (double)dec[i]) > err_bound(scale, rounds[r]))
                        fail_msg("amax %a: value %zu: %a decodes to %a", (double)amax, i,
                                 (double)src[i], (double)dec[i]);
                    assert_true(same_bits(res[i], src[i] - dec[i]));
                }
            }
        }
    }
    shoal_codec_simd_enable(1);
}

/* A NaN makes its block's scale NaN, an infinity +inf; either way the
 * block's codes are 0, it decodes to NaN everywhere, its residuals are NaN,
 * and the other blocks are as usual. add_encode keeps a non-finite block
 * non-finite, and turns an overflowing sum into one. */
static void test_nonfinite(void **state)
{
    (void)state;
    enum { N = 128 };
    static const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    float src[N], res[N], dec[N], local[N];
    unsigned char wire[4 * SCALE_BYTES + N], wire2[4 * SCALE_BYTES + N];
    for (int simd = 0; simd <= 1; simd++) {
        shoal_codec_simd_enable(simd);
        for (size_t r = 0; r < NROUNDS; r++) {
            shoal_codec_t c = make_codec(32, rounds[r], 3, 3);
            for (size_t k = 0; k < 4; k++) {
                for (size_t i = 0; i < N; i++)
                    src[i] = rng_signed();
                src[40 + k] = bad[k];                   /* block 1 */
                src[100] = INFINITY;                    /* block 3: inf and NaN: NaN */
                src[101] = NAN;
                encode_decode(&c, src, N, wire, res, dec);
                float s1 = scale_at(wire, 1);
                assert_true(k < 2 ? isnan(s1) : (isinf(s1) && s1 > 0));
                assert_true(isnan(scale_at(wire, 3)));
                assert_true(isfinite(scale_at(wire, 0)) && isfinite(scale_at(wire, 2)));
                for (size_t i = 0; i < N; i++) {
                    int bad_block = i / 32 == 1 || i / 32 == 3;
                    if (bad_block) {
                        assert_int_equal(code_at(wire, N, 32, i), 0);
                        assert_true(isnan(dec[i]));
                        assert_true(isnan(res[i]));
                    } else {
                        assert_true(isfinite(dec[i]));
                        assert_true(same_bits(res[i], src[i] - dec[i]));
                    }
                }
                /* Adding finite values keeps the bad blocks bad. */
                for (size_t i = 0; i < N; i++)
                    local[i] = 1.0f;
                c.ops->add_encode(&c, wire2, wire, local, NULL, res, N, 0);
                c.ops->decode(&c, dec, wire2, N, 0);
                for (size_t i = 0; i < N; i++) {
                    int bad_block = i / 32 == 1 || i / 32 == 3;
                    assert_true(bad_block ? isnan(dec[i]) && isnan(res[i]) : isfinite(dec[i]));
                }
                assert_true(isnan(scale_at(wire2, 1)) && isnan(scale_at(wire2, 3)));
            }
            /* An overflowing sum: FLT_MAX-sized blocks added twice. */
            for (size_t i = 0; i < N; i++)
                src[i] = i % 32 == 0 ? FLT_MAX : 1e30f;
            c.ops->encode(&c, wire, src, NULL, NULL, N, 0);
            c.ops->add_encode(&c, wire2, wire, src, NULL, res, N, 0);
            c.ops->decode(&c, dec, wire2, N, 0);
            for (size_t b = 0; b < 4; b++)
                assert_true(isinf(scale_at(wire2, b)) && scale_at(wire2, b) > 0);
            for (size_t i = 0; i < N; i++)
                assert_true(isnan(dec[i]) && isnan(res[i]));
        }
    }
    shoal_codec_simd_enable(1);
}

/* A failing case leaves by longjmp: restore the default for the next. */
static int simd_default(void **state)
{
    (void)state;
    shoal_codec_simd_enable(1);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_bytes),
        cmocka_unit_test_teardown(test_invalid_codec, simd_default),
        cmocka_unit_test_teardown(test_roundtrip_nearest, simd_default),
        cmocka_unit_test_teardown(test_roundtrip_stochastic, simd_default),
        cmocka_unit_test_teardown(test_stochastic_unbiased, simd_default),
        cmocka_unit_test_teardown(test_grid_and_ties, simd_default),
        cmocka_unit_test_teardown(test_pieces, simd_default),
        cmocka_unit_test(test_stream_inputs),
        cmocka_unit_test_teardown(test_ring, simd_default),
        cmocka_unit_test_teardown(test_simd_matches_ref, simd_default),
        cmocka_unit_test_teardown(test_addend, simd_default),
        cmocka_unit_test_teardown(test_zeros, simd_default),
        cmocka_unit_test_teardown(test_huge_and_tiny, simd_default),
        cmocka_unit_test_teardown(test_nonfinite, simd_default),
    };
    return cmocka_run_group_tests_name("codec_int8", tests, NULL, NULL);
}
