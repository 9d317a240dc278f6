/* The int4 codec (compress/int4.c) against its documented semantics,
 * checked by a reference written here from the definitions: the wire's
 * layout and size (nibble order, the unused nibble, nothing written past
 * the end), scales and codes under both roundings, non-finite, all-zero,
 * tiny and huge blocks, nearest's error bound, stochastic's unbiasedness,
 * the residual identity, the fused addend, add_encode (in place too), runs
 * cut into pieces, and error feedback: with the residual added back each
 * step, the running mean of what a constant input decodes to converges on
 * the input, while without it nearest stays off by its rounding. */
#include "harness.h"

#include "compress/codec.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The reference must round each product on its own, as the codec does. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static const size_t counts[] = {0, 1, 7, 31, 32, 65, 1000, 4099};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))
static const size_t blocks[] = {32, 64, 128};
#define NBLOCKS (sizeof(blocks) / sizeof(blocks[0]))
static const shoal_round_t rounds[] = {SHOAL_ROUND_NEAREST, SHOAL_ROUND_STOCHASTIC};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Uniform in [-a, a), with exact zeros of both signs now and then. */
static void fill(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next();
        x[i] = r % 23 == 0 ? ((r >> 8) % 2 ? 0.0f : -0.0f)
                           : (float)((double)(r >> 11) / 0x1p53 * 2.0 - 1.0) * a;
    }
}

static shoal_codec_t make(size_t block, shoal_round_t round, uint64_t seed, uint64_t step)
{
    return (shoal_codec_t){.ops = &shoal_codec_int4, .block = block, .round = round,
                           .seed = seed, .step = step};
}

static size_t nblocks_of(size_t count, size_t block)
{
    return (count + block - 1) / block;
}

/* The reference: block b's amax (NaN when the block holds a NaN or an
 * infinity) and scale, and value i's code. */
static float ref_amax(const shoal_codec_t *c, const float *x, size_t count, size_t b)
{
    size_t at = b * c->block, n = count - at < c->block ? count - at : c->block;
    float amax = 0;
    for (size_t i = at; i < at + n; i++) {
        if (isnan(x[i]) || isinf(x[i]))
            return NAN;
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    }
    return amax;
}

static float ref_scale(float amax)
{
    return isnan(amax) ? NAN : amax / 7.0f;
}

static int ref_code(const shoal_codec_t *c, float xi, float amax, size_t index)
{
    float scale = ref_scale(amax);
    if (isnan(scale) || scale == 0.0f)
        return 0;
    float pre = amax < 0x1p-100f ? 0x1p64f : 1.0f;
    float inv = 7.0f / (amax * pre);
    float xp = xi * pre;
    float y = xp * inv;
    double q;
    if (c->round == SHOAL_ROUND_NEAREST) {
        q = rint((double)y); /* ties to even */
    } else {
        /* y + u is exact in double (see int4.c): floor of the exact sum */
        float u = shoal_codec_uniform(shoal_codec_key(c->seed, c->step), index);
        q = floor((double)y + (double)u);
    }
    return q > 7 ? 7 : q < -7 ? -7 : (int)q;
}

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof(a)) == 0 || (isnan(a) && isnan(b));
}

/* Encode x, check the wire (in a buffer of exactly wire_bytes, guarded),
 * the decode and the residual against the reference. */
static void check_encode(const shoal_codec_t *c, const float *x, size_t count, size_t first)
{
    size_t nb = nblocks_of(count, c->block), bytes = c->ops->wire_bytes(c, count);
    assert_int_equal(bytes, nb * 4 + (count + 1) / 2);
    unsigned char *wire = harness_alloc_guarded(bytes);
    float *res = harness_alloc_guarded(count * sizeof(float));
    float *dec = harness_alloc_guarded(count * sizeof(float));
    c->ops->encode(c, wire, x, NULL, res, count, first);
    c->ops->decode(c, dec, wire, count, first);
    harness_assert_guard(wire, bytes, "wire");
    harness_assert_guard(res, count * sizeof(float), "residual");
    harness_assert_guard(dec, count * sizeof(float), "decode");
    for (size_t b = 0; b < nb; b++) {
        float scale;
        memcpy(&scale, wire + 4 * b, sizeof(scale));
        assert_true(same_bits(scale, ref_scale(ref_amax(c, x, count, b))));
    }
    const unsigned char *codes = wire + nb * 4;
    for (size_t i = 0; i < count; i++) {
        float scale, amax = ref_amax(c, x, count, i / c->block);
        memcpy(&scale, wire + 4 * (i / c->block), sizeof(scale));
        int q = ref_code(c, x[i], amax, first + i);
        unsigned nibble = i % 2 ? codes[i / 2] >> 4 : codes[i / 2] & 0xfu;
        assert_int_not_equal(nibble, 8); /* -8 is never written */
        assert_int_equal(nibble, (unsigned)q & 0xfu);
        float want = shoal_codec_mul((float)q, scale);
        assert_true(same_bits(dec[i], want));
        float r = x[i] - want;
        assert_true(same_bits(res[i], r));
    }
    if (count % 2) /* the last byte's unused nibble */
        assert_int_equal(wire[bytes - 1] >> 4, 0);
    free(wire);
    free(res);
    free(dec);
}

static void test_ops_table(void **state)
{
    (void)state;
    assert_int_equal(shoal_codec_int4.size, sizeof(shoal_codec_ops_t));
    assert_string_equal(shoal_codec_int4.name, "int4");
    shoal_codec_t c = make(64, SHOAL_ROUND_NEAREST, 0, 0);
    assert_int_equal(c.ops->wire_bytes(&c, 0), 0);
    assert_int_equal(c.ops->wire_bytes(&c, 1), 5);
    assert_int_equal(c.ops->wire_bytes(&c, 64), 4 + 32);
    assert_int_equal(c.ops->wire_bytes(&c, 4099), 65 * 4 + 2050);
    /* invalid codecs: size 0, and nothing touched by any operation */
    for (int k = 0; k < 2; k++) {
        c = make(64, SHOAL_ROUND_NEAREST, 0, 0);
        if (k == 0)
            c.block = 48;
        else
            c.round = (shoal_round_t)7;
        assert_int_equal(c.ops->wire_bytes(&c, 100), 0);
        float x[4] = {1, 2, 3, 4}, d[4] = {9, 9, 9, 9}, r[4] = {9, 9, 9, 9};
        unsigned char wire[32], out[32];
        memset(wire, 0xab, sizeof(wire));
        memset(out, 0xab, sizeof(out));
        c.ops->encode(&c, wire, x, x, r, 4, 0);
        c.ops->decode(&c, d, wire, 4, 0);
        c.ops->add_encode(&c, out, wire, x, x, r, 4, 0);
        for (size_t i = 0; i < sizeof(wire); i++)
            assert_true(wire[i] == 0xab && out[i] == 0xab);
        for (size_t i = 0; i < 4; i++)
            assert_true(d[i] == 9 && r[i] == 9);
    }
}

/* The nibble order and two's complement, by hand: block 32, values
 * 0..6 of a block whose amax is 7 (scale 1) encode as their own codes,
 * value 2j in the low nibble of byte j. */
static void test_layout(void **state)
{
    (void)state;
    float x[7] = {7, -1, 2, -7, 0, 3, -2};
    unsigned char wire[4 + 4];
    memset(wire, 0xff, sizeof(wire));
    shoal_codec_t c = make(32, SHOAL_ROUND_NEAREST, 0, 0);
    assert_int_equal(c.ops->wire_bytes(&c, 7), sizeof(wire));
    c.ops->encode(&c, wire, x, NULL, NULL, 7, 0);
    float scale;
    memcpy(&scale, wire, sizeof(scale));
    assert_true(scale == 1.0f);
    assert_int_equal(wire[4], 0xf7); /* 7, -1 */
    assert_int_equal(wire[5], 0x92); /* 2, -7 */
    assert_int_equal(wire[6], 0x30); /* 0, 3 */
    assert_int_equal(wire[7], 0x0e); /* -2, unused 0 */

    /* Ties go to even under nearest (scale 1, inv 1: y = x exactly). */
    float t[8] = {7, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 6.5f};
    float d[8];
    unsigned char tw[4 + 4];
    c.ops->encode(&c, tw, t, NULL, NULL, 8, 0);
    c.ops->decode(&c, d, tw, 8, 0);
    static const float even[8] = {7, 0, 2, 2, 0, -2, -2, 6};
    for (size_t i = 0; i < 8; i++)
        assert_true(same_bits(d[i], even[i])); /* -0.5 -> code 0 -> +0 */
}

/* Both roundings, every block size, sizes 0, 1, odd and multi-block,
 * first 0 and one past 2^32 (stochastic's stream index). */
static void test_encode(void **state)
{
    (void)state;
    float *x = malloc(4099 * sizeof(float));
    assert_non_null(x);
    for (size_t r = 0; r < 2; r++)
        for (size_t b = 0; b < NBLOCKS; b++)
            for (size_t k = 0; k < NCOUNTS; k++) {
                fill(x, counts[k], 3.0f);
                shoal_codec_t c = make(blocks[b], rounds[r], 42, 7);
                check_encode(&c, x, counts[k], 0);
                check_encode(&c, x, counts[k], ((size_t)1 << 32) + 1);
            }
    free(x);
}

/* A NaN or infinity spoils its block only: NaN scale, NaN decodes and
 * residuals there, the other blocks as usual. An all-zero block (zeros of
 * both signs) has scale 0 and decodes to +0. Blocks at the ends of the
 * range: amax FLT_MAX decodes finite; amax below 2^-100 (pre), subnormal,
 * and 3 * 2^-149 (scale 0: decodes to +0, residual x). */
static void test_specials(void **state)
{
    (void)state;
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    float x[96], dec[96], res[96];
    unsigned char wire[3 * 4 + 48];
    for (size_t k = 0; k < 3; k++)
        for (size_t r = 0; r < 2; r++) {
            fill(x, 96, 1.0f);
            for (size_t i = 64; i < 96; i++) /* block 2: zeros */
                x[i] = i % 2 ? -0.0f : 0.0f;
            x[40] = bad[k]; /* block 1 */
            shoal_codec_t c = make(32, rounds[r], 1, 2);
            check_encode(&c, x, 96, 0);
            c.ops->encode(&c, wire, x, NULL, res, 96, 0);
            c.ops->decode(&c, dec, wire, 96, 0);
            float scale;
            memcpy(&scale, wire + 4, sizeof(scale));
            assert_true(isnan(scale));
            for (size_t i = 0; i < 96; i++) {
                if (i >= 32 && i < 64) {
                    assert_true(isnan(dec[i]));
                    assert_true(isnan(res[i]));
                } else {
                    assert_true(isfinite(dec[i]));
                    assert_true(isfinite(res[i]));
                }
                if (i >= 64)
                    assert_true(same_bits(dec[i], 0.0f) && res[i] == 0.0f);
            }
        }
    static const float amax[] = {FLT_MAX, 0x1.fffffep-101f, 0x1p-120f, 1e-40f, 0x1p-147f,
                                 0x1.8p-148f};
    for (size_t k = 0; k < sizeof(amax) / sizeof(amax[0]); k++)
        for (size_t r = 0; r < 2; r++) {
            for (size_t i = 0; i < 32; i++) {
                double t = (double)(rng_next() >> 11) / 0x1p53 * 2.0 - 1.0;
                x[i] = (float)(t * amax[k]);
            }
            x[5] = -amax[k];
            shoal_codec_t c = make(32, rounds[r], 3, 4);
            check_encode(&c, x, 32, 0);
            c.ops->encode(&c, wire, x, NULL, res, 32, 0);
            c.ops->decode(&c, dec, wire, 32, 0);
            float scale;
            memcpy(&scale, wire, sizeof(scale));
            for (size_t i = 0; i < 32; i++) {
                assert_true(isfinite(dec[i]));
                if (scale == 0.0f)
                    assert_true(same_bits(dec[i], 0.0f) && same_bits(res[i], x[i]));
            }
            if (amax[k] == 0x1.8p-148f) {
                assert_true(scale == 0.0f);
            } else {
                assert_true(scale > 0.0f);
                if (rounds[r] == SHOAL_ROUND_NEAREST) /* the extreme: code -7 */
                    assert_true(same_bits(dec[5], -7.0f * scale));
            }
        }
}

/* The index of the first value of the stream with key, from index `from`
 * on, whose number u satisfies lo <= u * 2^24 < hi. */
static size_t find_index(uint32_t key, size_t from, uint32_t lo, uint32_t hi)
{
    for (size_t i = from; i < from + ((size_t)1 << 28); i++) {
        float u = shoal_codec_uniform(key, i) * 0x1p24f;
        if (u >= (float)lo && u < (float)hi)
            return i;
    }
    fail_msg("no index with u in [%u, %u) * 2^-24", lo, hi);
    return 0;
}

/* Stochastic rounding where fp32 would get it wrong: floor(y + u) of the
 * exact sum, although y + u rounded to fp32 would reach the next integer
 * (y just below an integer minus u, |y| in [4, 8) where fp32's spacing is
 * 2^-21 and u's 2^-24); and the clamp where y lies just beyond +-7 (x =
 * +-amax with 7 / amax rounded up) and u would round it to +-8. */
static void test_stochastic_edges(void **state)
{
    (void)state;
    shoal_codec_t c = make(32, SHOAL_ROUND_STOCHASTIC, 21, 8);
    uint32_t key = shoal_codec_key(c.seed, c.step);
    float x[32];
    const size_t first = 1000;
    /* amax 7: scale 1 and inv 1, so y = x exactly */
    x[0] = 7.0f;
    size_t short_of = 0;
    for (size_t i = 1; i < 32; i++) {
        float u = shoal_codec_uniform(key, first + i);
        /* the largest y on fp32's grid with y + u < k + 1, k = 5 or -7 */
        float k = i % 2 ? 5.0f : -7.0f;
        double y = floor((1.0 - (double)u) * 0x1p21) * 0x1p-21;
        if (y == 1.0 - (double)u)
            y -= 0x1p-21;
        x[i] = (float)(k + y);
        double gap = (k + 1) - ((double)x[i] + (double)u);
        short_of += gap > 0 && gap < 0x1p-22; /* fp32 would round the sum up */
        assert_true(gap > 0);
    }
    assert_true(short_of > 0);
    check_encode(&c, x, 32, first);

    /* y beyond +-7: amax with 7 / amax rounded up far enough */
    float amax = 1.0f, y = 0;
    for (; amax < 2.0f; amax = nextafterf(amax, 2.0f)) {
        float inv = 7.0f / amax;
        y = amax * inv;
        if (y > 7.0f)
            break;
    }
    assert_true(y > 7.0f);
    uint32_t j = (uint32_t)((y - 7.0f) * 0x1p24f); /* y = 7 + j 2^-24 */
    for (int sign = -1; sign <= 1; sign += 2) {
        for (size_t i = 0; i < 32; i++)
            x[i] = (float)((double)(rng_next() >> 11) / 0x1p53 * 2.0 - 1.0);
        x[3] = (float)sign * amax;
        /* +amax rounds up to 8 where u >= 1 - (y - 7); -amax stays at -8
         * where u < y - 7 */
        size_t at = sign > 0 ? find_index(key, 3, (1u << 24) - j, 1u << 24)
                             : find_index(key, 3, 0, j);
        check_encode(&c, x, 32, at - 3);
        unsigned char wire[4 + 16];
        float dec[32];
        c.ops->encode(&c, wire, x, NULL, NULL, 32, at - 3);
        c.ops->decode(&c, dec, wire, 32, at - 3);
        float scale;
        memcpy(&scale, wire, sizeof(scale));
        assert_true(same_bits(dec[3], (float)sign * 7.0f * scale));
    }
}

/* Nearest's error is at most half a scale per value, stochastic's below a
 * scale (up to the fp32 roundings, 2^-18 scale), at magnitudes from small
 * to huge. */
static void test_error_bound(void **state)
{
    (void)state;
    enum { N = 1000 };
    static const float amp[] = {1e-30f, 1.0f, 3e5f, 1e37f};
    float x[N], dec[N];
    unsigned char wire[N / 2 + 32 * 4];
    for (size_t a = 0; a < sizeof(amp) / sizeof(amp[0]); a++)
        for (size_t b = 0; b < NBLOCKS; b++)
            for (size_t r = 0; r < 2; r++) {
                fill(x, N, amp[a]);
                shoal_codec_t c = make(blocks[b], rounds[r], 9, a);
                c.ops->encode(&c, wire, x, NULL, NULL, N, 0);
                c.ops->decode(&c, dec, wire, N, 0);
                double bound = r == 0 ? 0.5 : 1.0;
                for (size_t i = 0; i < N; i++) {
                    float scale;
                    memcpy(&scale, wire + 4 * (i / blocks[b]), sizeof(scale));
                    double err = fabs((double)x[i] - (double)dec[i]);
                    assert_true(err <= (double)scale * (bound + 0x1p-18));
                }
            }
}

/* Stochastic is unbiased: over many steps the mean of decode approaches
 * x; nearest, the negative control, stays off by its rounding. */
static void test_unbiased(void **state)
{
    (void)state;
    enum { N = 64, STEPS = 20000 };
    float x[N], dec[N];
    double mean[N] = {0};
    unsigned char wire[4 + N / 2];
    fill(x, N, 2.0f);
    shoal_codec_t c = make(64, SHOAL_ROUND_STOCHASTIC, 11, 0);
    for (uint64_t s = 0; s < STEPS; s++) {
        c.step = s;
        c.ops->encode(&c, wire, x, NULL, NULL, N, 0);
        c.ops->decode(&c, dec, wire, N, 0);
        for (size_t i = 0; i < N; i++)
            mean[i] += dec[i] / STEPS;
    }
    float scale;
    memcpy(&scale, wire, sizeof(scale));
    /* Each decode is one of the two grid points around x: the mean's
     * standard deviation is at most scale / (2 sqrt(STEPS)); 6 of them. */
    double tol = 3 * scale / sqrt(STEPS), worst_nearest = 0;
    for (size_t i = 0; i < N; i++)
        assert_true(fabs(mean[i] - x[i]) < tol);
    c.round = SHOAL_ROUND_NEAREST;
    c.ops->encode(&c, wire, x, NULL, NULL, N, 0);
    c.ops->decode(&c, dec, wire, N, 0);
    for (size_t i = 0; i < N; i++)
        worst_nearest = fmax(worst_nearest, fabs((double)dec[i] - x[i]));
    assert_true(worst_nearest > 10 * tol);
}

/* encode with an addend gives the bits of encode of the sum, residual
 * aliasing the addend too; add_encode gives those of encode(decode(wire_in)
 * + (local + addend)), in place and with residual aliasing the addend too;
 * a run cut into whole blocks encodes as the whole, from first 0 and from
 * past 2^32. */
static void test_addend_add_pieces(void **state)
{
    (void)state;
    enum { N = 1000 };
    for (size_t r = 0; r < 2; r++) {
        shoal_codec_t c = make(64, rounds[r], 5, 3);
        size_t bytes = c.ops->wire_bytes(&c, N);
        float *src = malloc(N * sizeof(float)), *add = malloc(N * sizeof(float));
        float *sum = malloc(N * sizeof(float)), *res1 = malloc(N * sizeof(float));
        float *res2 = malloc(N * sizeof(float)), *dec = malloc(N * sizeof(float));
        float *add2 = malloc(N * sizeof(float));
        unsigned char *w1 = malloc(bytes), *w2 = malloc(bytes), *w3 = malloc(bytes);
        assert_true(src && add && sum && res1 && res2 && dec && add2 && w1 && w2 && w3);
        fill(src, N, 1.0f);
        fill(add, N, 0.25f);
        for (size_t i = 0; i < N; i++)
            sum[i] = src[i] + add[i];
        c.ops->encode(&c, w1, sum, NULL, res1, N, 0);
        c.ops->encode(&c, w2, src, add, add, N, 0); /* residual into the addend */
        assert_memory_equal(w1, w2, bytes);
        assert_memory_equal(res1, add, N * sizeof(float));

        /* add_encode against its definition */
        fill(add, N, 0.25f);
        c.ops->decode(&c, dec, w1, N, 0);
        for (size_t i = 0; i < N; i++) {
            float x = src[i] + add[i];
            sum[i] = dec[i] + x;
        }
        c.ops->encode(&c, w2, sum, NULL, res1, N, 0);
        c.ops->add_encode(&c, w3, w1, src, add, res2, N, 0);
        assert_memory_equal(w2, w3, bytes);
        assert_memory_equal(res1, res2, N * sizeof(float));
        memcpy(add2, add, N * sizeof(float));
        c.ops->add_encode(&c, w1, w1, src, add2, add2, N, 0); /* in place, aliased */
        assert_memory_equal(w1, w3, bytes);
        assert_memory_equal(add2, res1, N * sizeof(float));

        /* pieces of 192 values (3 blocks of 64) encode as the whole */
        static const size_t bases[] = {0, ((size_t)1 << 32) + 64};
        for (size_t k = 0; k < 2; k++) {
            c.ops->encode(&c, w1, src, NULL, NULL, N, bases[k]);
            size_t nb = nblocks_of(N, 64);
            for (size_t at = 0; at < N; at += 192) {
                size_t n = N - at < 192 ? N - at : 192, pb = nblocks_of(n, 64);
                unsigned char piece[3 * 4 + 96];
                c.ops->encode(&c, piece, src + at, NULL, NULL, n, bases[k] + at);
                assert_memory_equal(piece, w1 + at / 64 * 4, pb * 4);
                assert_memory_equal(piece + pb * 4, w1 + nb * 4 + at / 2, (n + 1) / 2);
            }
        }
        free(src), free(add), free(sum), free(res1), free(res2), free(dec), free(add2);
        free(w1), free(w2), free(w3);
    }
}

/* Error feedback: encoding x + residual each step, with the new residual
 * kept, the running mean of the decodes approaches x, while without
 * feedback nearest decodes to the same rounded value every step: the
 * negative control. */
static void test_error_feedback(void **state)
{
    (void)state;
    enum { N = 128, STEPS = 4000 };
    float x[N], res[N] = {0}, dec[N];
    double mean[N] = {0};
    unsigned char wire[4 + N / 2];
    fill(x, N, 1.0f);
    shoal_codec_t c = make(128, SHOAL_ROUND_NEAREST, 0, 0);
    for (int s = 0; s < STEPS; s++) {
        c.ops->encode(&c, wire, x, res, res, N, 0);
        c.ops->decode(&c, dec, wire, N, 0);
        for (size_t i = 0; i < N; i++)
            mean[i] += dec[i] / STEPS;
    }
    c.ops->encode(&c, wire, x, NULL, NULL, N, 0);
    c.ops->decode(&c, dec, wire, N, 0);
    double err_ef = 0, err_plain = 0, norm = 0;
    for (size_t i = 0; i < N; i++) {
        err_ef += (mean[i] - x[i]) * (mean[i] - x[i]);
        err_plain += ((double)dec[i] - x[i]) * ((double)dec[i] - x[i]);
        norm += (double)x[i] * x[i];
    }
    /* The residual stays within a scale, so the mean's error shrinks as
     * 1 / STEPS; without feedback it stays at the codec's own (about
     * scale / sqrt(12) a value, some 7% of the input's norm here). */
    assert_true(sqrt(err_ef / norm) < 1e-3);
    assert_true(sqrt(err_plain / norm) > 0.02);
}

/* The AVX2 kernels against the scalar path, bit for bit: encode with and
 * without the addend (the residual written into it), decode, add_encode
 * in place, both roundings, stochastic indices crossing 2^32; blocks with
 * a NaN, an infinity, all zeros (of both signs), amax below 2^-100 and
 * amax in the top binade, and a short last block. */
static void test_simd_scalar(void **state)
{
    (void)state;
    enum { N = 4099 };
    float *src = malloc(N * sizeof(float)), *add[2], *res[2], *dec[2], *plain[2];
    unsigned char *w[2];
    shoal_codec_t c0 = make(32, SHOAL_ROUND_NEAREST, 0, 0);
    size_t most = c0.ops->wire_bytes(&c0, N);
    for (int p = 0; p < 2; p++) {
        add[p] = malloc(N * sizeof(float));
        res[p] = malloc(N * sizeof(float));
        dec[p] = malloc(N * sizeof(float));
        plain[p] = malloc(N * sizeof(float));
        w[p] = malloc(most);
        assert_true(add[p] && res[p] && dec[p] && plain[p] && w[p]);
    }
    assert_non_null(src);
    for (size_t r = 0; r < 2; r++)
        for (size_t b = 0; b < NBLOCKS; b++) {
            fill(src, N, 2.0f);
            src[77] = NAN;
            src[1500] = -INFINITY;
            for (size_t i = 2048; i < 2048 + 128; i++)
                src[i] = i % 2 ? 0.0f : -0.0f;
            for (size_t i = 2304; i < 2304 + 128; i++)
                src[i] *= 0x1p-110f;
            src[2600] = FLT_MAX;
            src[2601] = -FLT_MAX;
            shoal_codec_t c = make(blocks[b], rounds[r], 9, 4);
            size_t bytes = c.ops->wire_bytes(&c, N);
            for (int p = 0; p < 2; p++) {
                shoal_codec_simd_enable(p == 0);
                rng_state = 0x9e3779b97f4a7c15ull; /* the same addend for both */
                fill(add[p], N, 0.5f);
                c.ops->encode(&c, w[p], src, NULL, plain[p], N, ((size_t)1 << 32) - 1000);
                c.ops->encode(&c, w[p], src, add[p], add[p], N, ((size_t)1 << 32) - 1000);
                c.ops->decode(&c, dec[p], w[p], N, 0);
                c.ops->add_encode(&c, w[p], w[p], src, add[p], res[p], N, 3);
            }
            shoal_codec_simd_enable(1);
            assert_memory_equal(w[0], w[1], bytes);
            assert_memory_equal(add[0], add[1], N * sizeof(float));
            assert_memory_equal(dec[0], dec[1], N * sizeof(float));
            assert_memory_equal(res[0], res[1], N * sizeof(float));
            assert_memory_equal(plain[0], plain[1], N * sizeof(float));
        }
    free(src);
    for (int p = 0; p < 2; p++)
        free(add[p]), free(res[p]), free(dec[p]), free(plain[p]), free(w[p]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_table),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_stochastic_edges),
        cmocka_unit_test(test_error_bound),
        cmocka_unit_test(test_unbiased),
        cmocka_unit_test(test_addend_add_pieces),
        cmocka_unit_test(test_error_feedback),
        cmocka_unit_test(test_simd_scalar),
    };
    return cmocka_run_group_tests_name("codec_int4", tests, NULL, NULL);
}
