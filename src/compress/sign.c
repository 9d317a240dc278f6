/* 1-bit sign quantisation: shoal_codec_sign (codec.h), the wire of 1-bit
 * Adam's compressed all-reduce and of signSGD with error feedback.
 *
 * Wire form of a run of count values, nblocks = ceil(count / block):
 *   nblocks fp32 scales, in the host's byte order, then ceil(count / 8)
 *   bytes of signs: value i's bit is bit i % 8 of byte i / 8 (1: negative).
 *   A block starts on a byte (block is 32, 64 or 128), so block b's bits
 *   start at wire + nblocks * 4 + b * block / 8. Only the run's last block
 *   may be short; its last byte's unused bits are 0. wire_bytes =
 *   nblocks * 4 + ceil(count / 8): 1/32 of fp32 plus a scale per block.
 *
 * Nearest (deterministic, biased): a block's scale is the mean of |x| over
 * its values, the scale that makes scale * sign(x)
 * closest to the block in the 2-norm; a value's bit is 1 where x < 0 (so
 * -0 encodes as +0). Decode: +scale or -scale. What this loses, which is
 * large (every value comes back with the block's mean magnitude), is what
 * error feedback carries to the next step: 1-bit Adam and EF-signSGD
 * converge only with it.
 *
 * Stochastic (unbiased): the scale is max |x| over the block; a value is
 * negative with probability (1 - x / scale) / 2, drawn with
 * u = shoal_codec_uniform(shoal_codec_key(seed, step), first + i): bit 1
 * where u < 0.5 - 0.5 * (x * inv), inv = 1 / scale in fp32. The mean of
 * decode over the stream is x, up to the fp32 roundings of inv and the
 * product and the 2^-24 resolution of u.
 *
 * A block holding a NaN or an infinity has scale NaN: each of its values
 * decodes to NaN, and so does each residual, so a non-finite value never
 * comes back finite (as in the int8 codec). An all-zero block has scale 0
 * and decodes to +0 (nearest) or +0 and -0 (stochastic draws a sign even
 * for 0; the residual is then 0 either way).
 *
 * encode's residual is x - decode(wire); add_encode encodes
 * s = decode(wire_in) + (local + addend) and writes the residual
 * s - decode(wire_out); blocks.h's drivers walk the blocks (an addend is
 * added with each sum rounded once, residual may be addend, wire_out may
 * be wire_in).
 *
 * The mean is summed in double, in eight lanes: lane j adds |x| of values
 * j, j + 8, j + 16, ... of the block in that order, and the lanes are
 * added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); the sum over
 * the block's count, in double, is rounded to fp32 once. A sum of fp32
 * magnitudes never overflows double, so a non-finite sum means a
 * non-finite value.
 *
 * Two paths give the same bits: the scalar code, written from these
 * definitions, and AVX2 kernels for whole blocks (the order of the sums
 * above is one AVX2 register of four doubles per half of eight values),
 * used where the CPU has AVX2 and shoal_codec_simd_enabled(); a run's
 * short last block, and stochastic values whose stream indices cross a
 * multiple of 2^32 within eight, take the scalar code. A codec whose block
 * is not 32, 64 or 128 or whose round is not a shoal_round_t is invalid:
 * wire_bytes gives 0 and the operations touch nothing. */
#include "blocks.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The scale of the n values of x (see the top). */
static float sign_scale(const shoal_codec_t *c, const float *x, size_t n)
{
    double lane[8] = {0};
    float amax = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        finite &= isfinite(a) != 0;
        lane[i % 8] += (double)a;
        if (a > amax)
            amax = a;
    }
    if (!finite)
        return NAN;
    if (c->round == SHOAL_ROUND_STOCHASTIC)
        return amax;
    double sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
                 ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    return (float)(sum / (double)n);
}

/* Encode the n values of block x (index first in the tensor) into scale_p
 * and bits; write x - decode into residual when it is not NULL. */
static void sign_block(const shoal_codec_t *c, uint32_t key, const float *x, size_t n,
                       size_t first, unsigned char *scale_p, unsigned char *bits,
                       float *residual)
{
    float scale = sign_scale(c, x, n);
    memcpy(scale_p, &scale, sizeof(scale));
    memset(bits, 0, (n + 7) / 8);
    float inv = scale > 0 ? shoal_codec_div(1.0f, scale) : 0.0f;
    for (size_t i = 0; i < n; i++) {
        int neg;
        if (c->round == SHOAL_ROUND_STOCHASTIC)
            neg = shoal_codec_uniform(key, first + i) <
                  0.5f - shoal_codec_mul(0.5f, shoal_codec_mul(x[i], inv));
        else
            neg = x[i] < 0;
        bits[i / 8] |= (unsigned char)(neg << (i % 8));
        if (residual)
            residual[i] = x[i] - (neg ? -scale : scale);
    }
}

static void sign_decode_block(float *dst, const unsigned char *scale_p,
                              const unsigned char *bits, size_t n)
{
    float scale;
    memcpy(&scale, scale_p, sizeof(scale));
    for (size_t i = 0; i < n; i++)
        dst[i] = bits[i / 8] >> (i % 8) & 1 ? -scale : scale;
}

/* ---- AVX2: the same definitions, eight values at a time ---- */

#ifdef SHOAL_BLOCKS_X86
#define SIGN_AVX2 SHOAL_BLOCKS_AVX2

/* The sum's order of the top, in two registers of four doubles: lo holds
 * lanes 0-3, hi lanes 4-7. The largest magnitude as bits: for floats >= 0
 * the unsigned order of the bits is the order of the values, and NaN and
 * infinity lie above every finite one. */
SIGN_AVX2 static float sign_scale_avx2(const shoal_codec_t *c, const float *x, size_t n)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    __m256i most = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += 8) {
        __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), absmask);
        most = _mm256_max_epu32(most, _mm256_castps_si256(a));
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
    }
    uint32_t m[8], top = 0;
    _mm256_storeu_si256((__m256i *)m, most);
    for (int j = 0; j < 8; j++)
        top = m[j] > top ? m[j] : top;
    if (top >= 0x7f800000u)
        return NAN;
    if (c->round == SHOAL_ROUND_STOCHASTIC) {
        float amax;
        memcpy(&amax, &top, sizeof(amax));
        return amax;
    }
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(lo, hi));
    return (float)(((t[0] + t[2]) + (t[1] + t[3])) / (double)n);
}

/* The lanes whose bit is set in byte b, as a mask. */
SIGN_AVX2 static __m256 sign_mask8(unsigned b)
{
    const __m256i lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i v = _mm256_and_si256(_mm256_set1_epi32((int)b), lanes);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(v, lanes));
}

/* sign_block for n a multiple of 8. */
SIGN_AVX2 static void sign_block_avx2(const shoal_codec_t *c, uint32_t key, const float *x,
                                      size_t n, size_t first, unsigned char *scale_p,
                                      unsigned char *bits, float *residual)
{
    float scale = sign_scale_avx2(c, x, n);
    memcpy(scale_p, &scale, sizeof(scale));
    float inv = scale > 0 ? shoal_codec_div(1.0f, scale) : 0.0f;
    const __m256 vs = _mm256_set1_ps(scale), vns = _mm256_set1_ps(-scale);
    const __m256 vinv = _mm256_set1_ps(inv), half = _mm256_set1_ps(0.5f);
    for (size_t i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), neg;
        uint64_t idx = (uint64_t)first + i;
        if (c->round == SHOAL_ROUND_NEAREST) {
            neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
        } else if ((uint32_t)idx <= UINT32_MAX - 7) {
            __m256 t = _mm256_sub_ps(half, _mm256_mul_ps(half, _mm256_mul_ps(v, vinv)));
            neg = _mm256_cmp_ps(shoal_blocks_uniform8(key, idx), t, _CMP_LT_OQ);
        } else {
            unsigned b = 0;
            for (unsigned j = 0; j < 8; j++)
                b |= (unsigned)(shoal_codec_uniform(key, idx + j) <
                                0.5f - shoal_codec_mul(0.5f, shoal_codec_mul(x[i + j], inv)))
                     << j;
            neg = sign_mask8(b);
        }
        bits[i / 8] = (unsigned char)_mm256_movemask_ps(neg);
        if (residual)
            _mm256_storeu_ps(residual + i, _mm256_sub_ps(v, _mm256_blendv_ps(vs, vns, neg)));
    }
}

SIGN_AVX2 static void sign_decode_block_avx2(float *dst, const unsigned char *scale_p,
                                             const unsigned char *bits, size_t n)
{
    float scale;
    memcpy(&scale, scale_p, sizeof(scale));
    const __m256 vs = _mm256_set1_ps(scale), vns = _mm256_set1_ps(-scale);
    for (size_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_blendv_ps(vs, vns, sign_mask8(bits[i / 8])));
}

#else
#define sign_block_avx2 NULL
#define sign_decode_block_avx2 NULL
#endif

static const shoal_blocks_t sign_blocks = {
    .bits = 1, .block = sign_block, .decode = sign_decode_block,
    .block_simd = sign_block_avx2, .decode_simd = sign_decode_block_avx2,
};

static size_t sign_wire_bytes(const shoal_codec_t *c, size_t count)
{
    return shoal_blocks_wire_bytes(&sign_blocks, c, count);
}

static void sign_encode(const shoal_codec_t *c, void *wire, const float *src,
                        const float *addend, float *residual, size_t count, size_t first)
{
    shoal_blocks_encode(&sign_blocks, c, wire, src, addend, residual, count, first);
}

static void sign_decode(const shoal_codec_t *c, float *dst, const void *wire, size_t count,
                        size_t first)
{
    (void)first;
    shoal_blocks_decode(&sign_blocks, c, dst, wire, count);
}

static void sign_add_encode(const shoal_codec_t *c, void *wire_out, const void *wire_in,
                            const float *local, const float *addend, float *residual,
                            size_t count, size_t first)
{
    shoal_blocks_add_encode(&sign_blocks, c, wire_out, wire_in, local, addend, residual, count,
                            first);
}

const shoal_codec_ops_t shoal_codec_sign = {
    .size = sizeof(shoal_codec_ops_t),
    .name = "sign",
    .wire_bytes = sign_wire_bytes,
    .encode = sign_encode,
    .decode = sign_decode,
    .add_encode = sign_add_encode,
};
