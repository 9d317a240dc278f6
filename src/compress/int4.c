/* 4-bit block quantisation: shoal_codec_int4 (codec.h), int8's scheme
 * (compress/int8.c) with codes of 4 bits, two to a byte: half the wire of
 * int8 for a coarser grid of 15 levels a block.
 *
 * Wire form of a run of count values, nblocks = ceil(count / block):
 *   nblocks fp32 scales, in the host's byte order, then ceil(count / 2)
 *   bytes of codes: value i's code is a 4-bit two's-complement integer q
 *   in [-7, 7] (-8 is never written), in the low nibble of byte i / 2
 *   when i is even, the high nibble when i is odd. A block starts on a
 *   byte (block is 32, 64 or 128), so block b's codes start at
 *   wire + nblocks * 4 + b * block / 2. Only the run's last block may be
 *   short; when count is odd the last byte's high nibble is 0. wire_bytes
 *   = nblocks * 4 + ceil(count / 2): 1/8 of fp32 plus a scale per block.
 *   The wire has no alignment requirement.
 *
 * Scale of a block, from amax = max |x| over its values:
 * - a block holding a NaN or an infinity has scale NaN (the host's NAN)
 *   and codes 0: every one of its values decodes to NaN (0 * NaN), and so
 *   does every residual of the block, so a non-finite value never comes
 *   back finite (as in the int8 and sign codecs); in add_encode this also
 *   catches a non-finite incoming block and a sum that overflows.
 * - otherwise scale = amax / 7 in fp32, rounded once. 7 * scale never
 *   rounds to infinity (every fp32 amax of the top binade was checked), so
 *   every code decodes to a finite value. scale is 0 for an all-zero
 *   block and for amax <= 3 * 2^-149 (where amax / 7 rounds to 0): the
 *   codes are then 0 and the block decodes to +0.
 *
 * Code of a value x of a finite block: y = (x * pre) * inv in fp32, each
 * product rounded once, where inv = 7 / (amax * pre) rounded once, pre = 1,
 * or 2^64 where amax < 2^-100 (7 / amax could overflow); inv = 0 when scale
 * is 0. The products with pre are exact, so y is x times the rounded
 * 7 / amax.
 * - nearest: q = clamp(nearbyintf(y), -7, 7): to nearest, ties to even,
 *   in the default rounding mode;
 * - stochastic: q = clamp(floor(y + u), -7, 7), the sum exact, with
 *   u = shoal_codec_uniform(shoal_codec_key(seed, step), first + i) for the
 *   value of index first + i of the tensor. It is evaluated as
 *   floorf(y) + (y - floorf(y) >= 1 - u), where every operation is exact in
 *   fp32 (|y| < 8), so y rounds up with probability frac(y), up to the 2^-24
 *   resolution of u: unbiased.
 * Decode: q * scale in fp32 (shoal_codec_mul; a -0 input comes back +0).
 * A code of -8, which no encode writes, decodes to -8 * scale.
 *
 * Error: in a finite block whose scale is a normal float, |x - decode(x)|
 * is at most scale / 2 for nearest and below scale for stochastic, both up
 * to the fp32 roundings of scale, inv, y and the product (together under
 * 2^-18 * scale). Blocks whose scale is subnormal (amax < 7 * 2^-126) lose
 * precision with it.
 *
 * encode's residual is x - decode(wire); add_encode forms
 * s = decode(wire_in) + (local + addend) a block at a time on the stack
 * (each sum rounded to fp32 once), encodes s and writes the residual
 * s - decode(wire_out); a block of wire_in is read whole before the same
 * block of wire_out is written, so wire_out may equal wire_in. With an
 * addend, x = src + addend rounded once: the same bits as a caller adding
 * the arrays first. A block's addend is read before its residual is
 * written, so residual may be addend. Residuals are computed from the code
 * as stored, so they are exactly x minus what decode gives back.
 *
 * This scalar code is the reference; blocks of whole 8-lane vectors take
 * AVX2 kernels where the CPU has AVX2 and shoal_codec_simd_enabled(), with
 * the same bits (the blocks whose scale needs pre, or that hold a
 * non-finite value, fall back to the scalar code). Rounding assumes the
 * default floating-point environment (round to nearest, subnormals
 * neither flushed nor treated as zero). A codec whose block is not 32, 64
 * or 128 or whose round is not a shoal_round_t is invalid: wire_bytes
 * gives 0 and the operations touch nothing. */

/* Never fuse a multiply and an add: the residual x - q * scale must be
 * x minus the decoded value, rounded on its own. (gcc does not fuse in ISO
 * C mode, -std=c11.) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include "blocks.h"

#include <math.h>
#include <string.h>

#define INT4_QMAX 7.0f
/* Below this amax, 7 / amax could overflow: pre scales amax up first. */
#define INT4_TINY 0x1p-100f
#define INT4_PRE_TINY 0x1p64f

/* What a block's quantisation needs (see the top). */
typedef struct {
    float scale;
    float pre;
    float inv;
    int finite;
} int4_params_t;

/* The parameters of the n values of x. */
static int4_params_t int4_params(const float *x, size_t n)
{
    int4_params_t p = {0.0f, 1.0f, 0.0f, 1};
    float amax = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!isfinite(a)) {
            p.scale = NAN;
            p.finite = 0;
            return p;
        }
        if (a > amax)
            amax = a;
    }
    p.scale = shoal_codec_div(amax, INT4_QMAX);
    if (p.scale == 0.0f)
        return p;
    if (amax < INT4_TINY)
        p.pre = INT4_PRE_TINY;
    p.inv = shoal_codec_div(INT4_QMAX, shoal_codec_mul(amax, p.pre));
    return p;
}

/* The code of value x (index `index` of the tensor) of a finite block. */
static int int4_code(const shoal_codec_t *c, const int4_params_t *p, uint32_t key, float x,
                     size_t index)
{
    float y = shoal_codec_mul(shoal_codec_mul(x, p->pre), p->inv);
    float q;
    if (c->round == SHOAL_ROUND_STOCHASTIC) {
        float f = floorf(y);
        q = f + (y - f >= 1.0f - shoal_codec_uniform(key, index) ? 1.0f : 0.0f);
    } else {
        q = nearbyintf(y);
    }
    q = q > INT4_QMAX ? INT4_QMAX : q < -INT4_QMAX ? -INT4_QMAX : q;
    return (int)q;
}

/* Value i's code of a block's codes. */
static int int4_code_get(const unsigned char *codes, size_t i)
{
    int v = codes[i / 2] >> (i % 2 * 4) & 0xf;
    return v >= 8 ? v - 16 : v;
}

/* Encode the n values of block x (index first in the tensor) into scale_p
 * and codes; write x - decode into residual when it is not NULL. */
static void int4_block(const shoal_codec_t *c, uint32_t key, const float *x, size_t n,
                       size_t first, unsigned char *scale_p, unsigned char *codes,
                       float *residual)
{
    int4_params_t p = int4_params(x, n);
    memcpy(scale_p, &p.scale, sizeof(p.scale));
    memset(codes, 0, (n + 1) / 2);
    for (size_t i = 0; i < n; i++) {
        int q = p.finite ? int4_code(c, &p, key, x[i], first + i) : 0;
        codes[i / 2] |= (unsigned char)(((unsigned)q & 0xfu) << (i % 2 * 4));
        if (residual)
            residual[i] = x[i] - shoal_codec_mul((float)q, p.scale);
    }
}

static void int4_decode_block(float *dst, const unsigned char *scale_p,
                              const unsigned char *codes, size_t n)
{
    float scale;
    memcpy(&scale, scale_p, sizeof(scale));
    for (size_t i = 0; i < n; i++)
        dst[i] = shoal_codec_mul((float)int4_code_get(codes, i), scale);
}

#ifdef SHOAL_BLOCKS_X86
/* int4_block for n a multiple of 8. The block's amax is the largest
 * |x| as bits (for floats >= 0 the unsigned order of the bits is the order
 * of the values, and NaN and infinity lie above every finite one). */
SHOAL_BLOCKS_AVX2 static void int4_block_avx2(const shoal_codec_t *c, uint32_t key,
                                              const float *x, size_t n, size_t first,
                                              unsigned char *scale_p, unsigned char *codes,
                                              float *residual)
{
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
    __m256i most = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += 8)
        most = _mm256_max_epu32(most,
                                _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)),
                                                 absmask));
    uint32_t m[8], top = 0;
    _mm256_storeu_si256((__m256i *)m, most);
    for (int j = 0; j < 8; j++)
        top = m[j] > top ? m[j] : top;
    float amax;
    memcpy(&amax, &top, sizeof(amax));
    if (top >= 0x7f800000u || amax < INT4_TINY) {
        int4_block(c, key, x, n, first, scale_p, codes, residual);
        return;
    }
    /* pre = 1: y = x * inv, inv = 7 / amax. */
    float scale = shoal_codec_div(amax, INT4_QMAX), inv = shoal_codec_div(INT4_QMAX, amax);
    memcpy(scale_p, &scale, sizeof(scale));
    const __m256 vinv = _mm256_set1_ps(inv), vscale = _mm256_set1_ps(scale);
    const __m256 qmax = _mm256_set1_ps(INT4_QMAX), qmin = _mm256_set1_ps(-INT4_QMAX);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256i nibble = _mm256_set1_epi32(0xf);
    for (size_t i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), y = _mm256_mul_ps(v, vinv), q;
        uint64_t idx = (uint64_t)first + i;
        if (c->round == SHOAL_ROUND_NEAREST) {
            q = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        } else if ((uint32_t)idx <= UINT32_MAX - 7) {
            __m256 f = _mm256_floor_ps(y);
            __m256 up = _mm256_cmp_ps(_mm256_sub_ps(y, f),
                                      _mm256_sub_ps(one, shoal_blocks_uniform8(key, idx)),
                                      _CMP_GE_OQ);
            q = _mm256_add_ps(f, _mm256_and_ps(up, one));
        } else {
            float t[8];
            for (unsigned j = 0; j < 8; j++) {
                float yj = x[i + j] * inv, f = floorf(yj);
                t[j] = f + (yj - f >= 1.0f - shoal_codec_uniform(key, idx + j) ? 1.0f : 0.0f);
            }
            q = _mm256_loadu_ps(t);
        }
        /* Through the integers, so that a code of 0 is +0, as the scalar
         * path's (float)q is. */
        __m256i qi = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(q, qmin), qmax));
        if (residual)
            _mm256_storeu_ps(residual + i,
                             _mm256_sub_ps(v, _mm256_mul_ps(_mm256_cvtepi32_ps(qi), vscale)));
        /* Lanes 2j and 2j+1 into the low byte of 64-bit lane j. */
        __m256i t = _mm256_and_si256(qi, nibble);
        t = _mm256_or_si256(t, _mm256_srli_epi64(t, 28));
        uint64_t pairs[4];
        _mm256_storeu_si256((__m256i *)pairs, t);
        for (int j = 0; j < 4; j++)
            codes[i / 2 + (size_t)j] = (unsigned char)pairs[j];
    }
}

SHOAL_BLOCKS_AVX2 static void int4_decode_block_avx2(float *dst, const unsigned char *scale_p,
                                                     const unsigned char *codes, size_t n)
{
    float scale;
    memcpy(&scale, scale_p, sizeof(scale));
    const __m256 vs = _mm256_set1_ps(scale);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i nibble = _mm256_set1_epi32(0xf), eight = _mm256_set1_epi32(8);
    for (size_t i = 0; i < n; i += 8) {
        uint32_t b;
        memcpy(&b, codes + i / 2, sizeof(b));
        __m256i v = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)b), shifts),
                                     nibble);
        v = _mm256_sub_epi32(_mm256_xor_si256(v, eight), eight); /* the nibble's sign */
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtepi32_ps(v), vs));
    }
}
#else
#define int4_block_avx2 NULL
#define int4_decode_block_avx2 NULL
#endif

static const shoal_blocks_t int4_blocks = {
    .bits = 4, .block = int4_block, .decode = int4_decode_block,
    .block_simd = int4_block_avx2, .decode_simd = int4_decode_block_avx2,
};

static size_t int4_wire_bytes(const shoal_codec_t *c, size_t count)
{
    return shoal_blocks_wire_bytes(&int4_blocks, c, count);
}

static void int4_encode(const shoal_codec_t *c, void *wire, const float *src,
                        const float *addend, float *residual, size_t count, size_t first)
{
    shoal_blocks_encode(&int4_blocks, c, wire, src, addend, residual, count, first);
}

static void int4_decode(const shoal_codec_t *c, float *dst, const void *wire, size_t count,
                        size_t first)
{
    (void)first;
    shoal_blocks_decode(&int4_blocks, c, dst, wire, count);
}

static void int4_add_encode(const shoal_codec_t *c, void *wire_out, const void *wire_in,
                            const float *local, const float *addend, float *residual,
                            size_t count, size_t first)
{
    shoal_blocks_add_encode(&int4_blocks, c, wire_out, wire_in, local, addend, residual, count,
                            first);
}

const shoal_codec_ops_t shoal_codec_int4 = {
    .size = sizeof(shoal_codec_ops_t),
    .name = "int4",
    .wire_bytes = int4_wire_bytes,
    .encode = int4_encode,
    .decode = int4_decode,
    .add_encode = int4_add_encode,
};
