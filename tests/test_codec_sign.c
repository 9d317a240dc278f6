/* The sign codec (compress/sign.c), both its paths (the AVX2 kernels and
 * the scalar code, compared bit for bit too), against its documented semantics,
 * checked by a reference written here from the definitions: the wire's
 * layout and size, nearest's mean-magnitude scale and signs, stochastic's
 * max scale and unbiased signs, non-finite blocks, the residual identity,
 * the fused addend, add_encode (in place too), runs cut into pieces, and
 * error feedback: with the residual added back each step, the running mean
 * of what a constant input decodes to converges on the input. */
#include "harness.h"

#include "compress/codec.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const size_t counts[] = {0, 1, 7, 31, 32, 65, 1000, 4099};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))
static const size_t blocks[] = {32, 64, 128};
#define NBLOCKS (sizeof(blocks) / sizeof(blocks[0]))

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
    return (shoal_codec_t){.ops = &shoal_codec_sign, .block = block, .round = round,
                           .seed = seed, .step = step};
}

static size_t nblocks_of(size_t count, size_t block)
{
    return (count + block - 1) / block;
}

/* The reference: block b's scale and value i's decoded value. */
static float ref_scale(const shoal_codec_t *c, const float *x, size_t count, size_t b)
{
    size_t at = b * c->block, n = count - at < c->block ? count - at : c->block;
    double lane[8] = {0}; /* lane j: values j, j + 8, ... of the block, in order */
    float amax = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[at + i]) || isinf(x[at + i]))
            return NAN;
        lane[i % 8] += fabsf(x[at + i]);
        amax = fabsf(x[at + i]) > amax ? fabsf(x[at + i]) : amax;
    }
    double sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
                 ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    return c->round == SHOAL_ROUND_STOCHASTIC ? amax : (float)(sum / (double)n);
}

static int ref_negative(const shoal_codec_t *c, const float *x, size_t i, size_t first,
                        float scale)
{
    if (c->round == SHOAL_ROUND_NEAREST)
        return x[i] < 0;
    float inv = scale > 0 ? 1.0f / scale : 0.0f;
    float u = shoal_codec_uniform(shoal_codec_key(c->seed, c->step), first + i);
    return u < 0.5f - 0.5f * (x[i] * inv);
}

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof(a)) == 0 || (isnan(a) && isnan(b));
}

/* Encode x, check the wire, the decode and the residual against the
 * reference. */
static void check_encode(const shoal_codec_t *c, const float *x, size_t count, size_t first)
{
    size_t nb = nblocks_of(count, c->block), bytes = c->ops->wire_bytes(c, count);
    assert_int_equal(bytes, nb * 4 + (count + 7) / 8);
    unsigned char *wire = malloc(bytes + 1);
    float *res = malloc((count + 1) * sizeof(float)), *dec = malloc((count + 1) * sizeof(float));
    assert_non_null(wire);
    assert_non_null(res);
    assert_non_null(dec);
    c->ops->encode(c, wire, x, NULL, res, count, first);
    c->ops->decode(c, dec, wire, count, first);
    for (size_t b = 0; b < nb; b++) {
        float scale, want = ref_scale(c, x, count, b);
        memcpy(&scale, wire + 4 * b, sizeof(scale));
        assert_true(same_bits(scale, want));
    }
    for (size_t i = 0; i < count; i++) {
        float scale;
        memcpy(&scale, wire + 4 * (i / c->block), sizeof(scale));
        int neg = ref_negative(c, x, i, first, scale);
        assert_int_equal(wire[nb * 4 + i / 8] >> (i % 8) & 1, neg);
        assert_true(same_bits(dec[i], neg ? -scale : scale));
        assert_true(same_bits(res[i], x[i] - dec[i]));
    }
    if (count % 8) /* the last byte's unused bits */
        assert_int_equal(wire[bytes - 1] >> (count % 8), 0);
    free(wire);
    free(res);
    free(dec);
}

static void test_ops_table(void **state)
{
    (void)state;
    assert_int_equal(shoal_codec_sign.size, sizeof(shoal_codec_ops_t));
    assert_string_equal(shoal_codec_sign.name, "sign");
    shoal_codec_t c = make(64, SHOAL_ROUND_NEAREST, 0, 0);
    assert_int_equal(c.ops->wire_bytes(&c, 0), 0);
    assert_int_equal(c.ops->wire_bytes(&c, 1), 5);
    assert_int_equal(c.ops->wire_bytes(&c, 4099), 65 * 4 + 513);
    c.block = 48; /* invalid: nothing, and nothing touched */
    assert_int_equal(c.ops->wire_bytes(&c, 100), 0);
    float x[4] = {1, 2, 3, 4}, d[4] = {9, 9, 9, 9};
    unsigned char wire[32];
    memset(wire, 0xab, sizeof(wire));
    c.ops->encode(&c, wire, x, NULL, NULL, 4, 0);
    c.ops->decode(&c, d, wire, 4, 0);
    assert_int_equal(wire[0], 0xab);
    assert_true(d[0] == 9 && d[3] == 9);
    c.block = 64;
    c.round = (shoal_round_t)7;
    assert_int_equal(c.ops->wire_bytes(&c, 100), 0);
}

/* Both roundings, every block size, sizes 0, 1, odd and multi-block,
 * first 0 and one past 2^32 (stochastic's stream index). */
static void test_encode(void **state)
{
    (void)state;
    static const shoal_round_t rounds[] = {SHOAL_ROUND_NEAREST, SHOAL_ROUND_STOCHASTIC};
    float *x = malloc(4099 * sizeof(float));
    assert_non_null(x);
    /* Both paths (the SIMD kernels where the CPU has them), and stream
     * indices that cross 2^32 inside eight values. */
    for (int simd = 1; simd >= 0; simd--) {
        shoal_codec_simd_enable(simd);
        for (size_t r = 0; r < 2; r++)
            for (size_t b = 0; b < NBLOCKS; b++)
                for (size_t k = 0; k < NCOUNTS; k++) {
                    fill(x, counts[k], 3.0f);
                    shoal_codec_t c = make(blocks[b], rounds[r], 42, 7);
                    check_encode(&c, x, counts[k], 0);
                    check_encode(&c, x, counts[k], ((size_t)1 << 32) + 11);
                    check_encode(&c, x, counts[k], ((size_t)1 << 32) - 3 * 64 - 4);
                }
    }
    shoal_codec_simd_enable(1);
    free(x);
}

/* A NaN or infinity spoils its block only: NaN scale, NaN decodes and
 * residuals there, the other blocks as usual. An all-zero block has
 * scale 0. */
static void test_specials(void **state)
{
    (void)state;
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    float x[96];
    for (size_t k = 0; k < 3; k++)
        for (int round = 0; round < 2; round++) {
            fill(x, 96, 1.0f);
            memset(x + 64, 0, 32 * sizeof(float)); /* block 2: zeros */
            x[40] = bad[k];                       /* block 1 */
            shoal_codec_t c = make(32, (shoal_round_t)round, 1, 2);
            check_encode(&c, x, 96, 0);
            unsigned char wire[3 * 4 + 12];
            float dec[96], res[96];
            c.ops->encode(&c, wire, x, NULL, res, 96, 0);
            c.ops->decode(&c, dec, wire, 96, 0);
            for (size_t i = 0; i < 96; i++) {
                if (i >= 32 && i < 64) {
                    assert_true(isnan(dec[i]));
                    assert_true(isnan(res[i]));
                } else {
                    assert_true(isfinite(dec[i]));
                    assert_true(isfinite(res[i]));
                }
                if (i >= 64)
                    assert_true(dec[i] == 0.0f && res[i] == 0.0f);
            }
        }
}

/* Nearest keeps each block's 1-norm: the sum of |decode| is the block's
 * count times its mean magnitude. Stochastic is unbiased: over many
 * steps the mean of decode approaches x. */
static void test_scales_and_bias(void **state)
{
    (void)state;
    enum { N = 64, STEPS = 20000 };
    float x[N], dec[N];
    unsigned char wire[4 + N / 8];
    fill(x, N, 2.0f);
    shoal_codec_t c = make(64, SHOAL_ROUND_NEAREST, 0, 0);
    c.ops->encode(&c, wire, x, NULL, NULL, N, 0);
    c.ops->decode(&c, dec, wire, N, 0);
    double l1x = 0, l1d = 0;
    for (size_t i = 0; i < N; i++) {
        l1x += fabsf(x[i]);
        l1d += fabsf(dec[i]);
    }
    assert_true(fabs(l1x - l1d) <= 1e-5 * l1x);
    double mean[N] = {0};
    float amax = 0;
    for (size_t i = 0; i < N; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    c.round = SHOAL_ROUND_STOCHASTIC;
    for (uint64_t s = 0; s < STEPS; s++) {
        c.step = s;
        c.ops->encode(&c, wire, x, NULL, NULL, N, 0);
        c.ops->decode(&c, dec, wire, N, 0);
        for (size_t i = 0; i < N; i++)
            mean[i] += dec[i] / STEPS;
    }
    /* Each decode is +-amax: the mean's standard deviation is at most
     * amax / sqrt(STEPS); 5 of them. */
    for (size_t i = 0; i < N; i++)
        assert_true(fabs(mean[i] - x[i]) < 5 * amax / sqrt(STEPS));
}

/* encode with an addend gives the bits of encode of the sum, residual
 * aliasing the addend too; add_encode gives those of encode(decode(wire_in)
 * + (local + addend)), in place too; a run cut into whole blocks encodes
 * as the whole. */
static void test_addend_add_pieces(void **state)
{
    (void)state;
    enum { N = 1000 };
    for (int round = 0; round < 2; round++) {
        shoal_codec_t c = make(64, (shoal_round_t)round, 5, 3);
        size_t bytes = c.ops->wire_bytes(&c, N);
        float *src = malloc(N * sizeof(float)), *add = malloc(N * sizeof(float));
        float *sum = malloc(N * sizeof(float)), *res1 = malloc(N * sizeof(float));
        float *res2 = malloc(N * sizeof(float)), *dec = malloc(N * sizeof(float));
        unsigned char *w1 = malloc(bytes), *w2 = malloc(bytes), *w3 = malloc(bytes);
        assert_true(src && add && sum && res1 && res2 && dec && w1 && w2 && w3);
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
        for (size_t i = 0; i < N; i++)
            sum[i] = dec[i] + (src[i] + add[i]);
        c.ops->encode(&c, w2, sum, NULL, res1, N, 0);
        c.ops->add_encode(&c, w3, w1, src, add, res2, N, 0);
        assert_memory_equal(w2, w3, bytes);
        assert_memory_equal(res1, res2, N * sizeof(float));
        c.ops->add_encode(&c, w1, w1, src, add, res2, N, 0); /* in place */
        assert_memory_equal(w1, w3, bytes);

        /* pieces of 192 values (3 blocks of 64) encode as the whole */
        c.ops->encode(&c, w1, src, NULL, NULL, N, 0);
        size_t nb = nblocks_of(N, 64);
        for (size_t at = 0; at < N; at += 192) {
            size_t n = N - at < 192 ? N - at : 192, pb = nblocks_of(n, 64);
            unsigned char piece[3 * 4 + 24];
            c.ops->encode(&c, piece, src + at, NULL, NULL, n, at);
            assert_memory_equal(piece, w1 + at / 64 * 4, pb * 4);
            assert_memory_equal(piece + pb * 4, w1 + nb * 4 + at / 8, (n + 7) / 8);
        }
        free(src), free(add), free(sum), free(res1), free(res2), free(dec);
        free(w1), free(w2), free(w3);
    }
}

/* The SIMD kernels against the scalar path, bit for bit: encode with and
 * without the addend (the residual written into it), decode, add_encode
 * in place; specials included. */
static void test_simd_scalar(void **state)
{
    (void)state;
    enum { N = 4099 };
    float *src = malloc(N * sizeof(float)), *add[2], *res[2], *dec[2];
    unsigned char *w[2];
    shoal_codec_t c0 = make(128, SHOAL_ROUND_NEAREST, 0, 0);
    size_t most = c0.ops->wire_bytes(&c0, N) * 4;
    for (int p = 0; p < 2; p++) {
        add[p] = malloc(N * sizeof(float));
        res[p] = malloc(N * sizeof(float));
        dec[p] = malloc(N * sizeof(float));
        w[p] = malloc(most);
        assert_true(add[p] && res[p] && dec[p] && w[p]);
    }
    assert_non_null(src);
    for (int round = 0; round < 2; round++)
        for (size_t b = 0; b < NBLOCKS; b++) {
            fill(src, N, 2.0f);
            src[77] = NAN;
            src[1500] = -INFINITY;
            memset(src + 2048, 0, 128 * sizeof(float));
            shoal_codec_t c = make(blocks[b], (shoal_round_t)round, 9, 4);
            size_t bytes = c.ops->wire_bytes(&c, N);
            for (int p = 0; p < 2; p++) {
                shoal_codec_simd_enable(p == 0);
                rng_state = 0x9e3779b97f4a7c15ull; /* the same addend for both */
                fill(add[p], N, 0.5f);
                c.ops->encode(&c, w[p], src, add[p], add[p], N, ((size_t)1 << 32) - 1000);
                c.ops->decode(&c, dec[p], w[p], N, 0);
                c.ops->add_encode(&c, w[p], w[p], src, add[p], res[p], N, 3);
            }
            shoal_codec_simd_enable(1);
            assert_memory_equal(w[0], w[1], bytes);
            assert_memory_equal(add[0], add[1], N * sizeof(float));
            assert_memory_equal(dec[0], dec[1], N * sizeof(float));
            assert_memory_equal(res[0], res[1], N * sizeof(float));
        }
    free(src);
    for (int p = 0; p < 2; p++)
        free(add[p]), free(res[p]), free(dec[p]), free(w[p]);
}

/* Error feedback: encoding x + residual each step, with the new residual
 * kept, the running mean of the decodes approaches x (what 1-bit Adam and
 * EF-signSGD rely on), while without feedback nearest decodes to the same
 * biased value every step: the negative control. */
static void test_error_feedback(void **state)
{
    (void)state;
    enum { N = 128, STEPS = 4000 };
    float x[N], res[N] = {0}, dec[N];
    double mean[N] = {0}, plain[N] = {0};
    unsigned char wire[4 + N / 8];
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
        plain[i] = dec[i];
        err_ef += (mean[i] - x[i]) * (mean[i] - x[i]);
        err_plain += (plain[i] - x[i]) * (plain[i] - x[i]);
        norm += (double)x[i] * x[i];
    }
    /* The residual stays bounded (a few scales), so the mean's error
     * shrinks as 1 / STEPS; without feedback it stays at the codec's own. */
    assert_true(sqrt(err_ef / norm) < 0.01);
    assert_true(sqrt(err_plain / norm) > 0.3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_table),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_scales_and_bias),
        cmocka_unit_test(test_addend_add_pieces),
        cmocka_unit_test(test_simd_scalar),
        cmocka_unit_test(test_error_feedback),
    };
    return cmocka_run_group_tests_name("codec_sign", tests, NULL, NULL);
}
