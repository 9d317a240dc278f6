/* Element math of the int8 codec (compress/int8.c, whose head comment
 * defines the wire form, the scales and the codes): a block's parameters
 * from its amax, the code of a value under either rounding, the decoded
 * value, and whole blocks of a run built from them. The CPU's scalar
 * reference path calls these functions, and so does the CUDA module's
 * codec kernel (cuda/kern.h), compiled there as __host__ __device__: the
 * tests that check the reference thus check the device's arithmetic, and
 * the device's wire is the host's, bit for bit. int8.c's SIMD kernels use
 * the parameters and the wire's scale accessors, and compute the codes
 * their own way, to the same bits (their tests compare).
 *
 * No libm call here differs between host and device: fabsf, floorf and
 * nearbyintf are exact on both; the products and quotients go through
 * shoal_codec_mul and shoal_codec_div, never fused. NaN and infinity are
 * told by their bits, and written as the bits the host's NAN and INFINITY
 * have, so the scales of non-finite blocks match too. */
#ifndef SHOAL_COMPRESS_INT8_ELEM_H
#define SHOAL_COMPRESS_INT8_ELEM_H

#include "base/dtype.h"
#include "compress/codec.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SHOAL_INT8_MAX_BLOCK 128
#define SHOAL_INT8_QMAX 127.0f
#define SHOAL_INT8_SCALE_BYTES sizeof(float)
/* Below this amax, 127 / amax could overflow: pre scales amax up first. */
#define SHOAL_INT8_TINY 0x1p-100f
#define SHOAL_INT8_PRE_TINY 0x1p64f
/* The quiet NaN and the infinity of the host's NAN and INFINITY. */
#define SHOAL_INT8_NAN_BITS 0x7fc00000u
#define SHOAL_INT8_INF_BITS 0x7f800000u

/* What a block's quantisation needs, derived from its amax alone. */
typedef struct {
    float scale;
    float pre;
    float inv;
    int finite;
} shoal_int8_params_t;

static inline SHOAL_HD size_t shoal_int8_nblocks(size_t count, size_t block)
{
    return count / block + (count % block != 0);
}

static inline SHOAL_HD shoal_int8_params_t shoal_int8_params(float amax)
{
    shoal_int8_params_t p = {0.0f, 1.0f, 0.0f, 1};
    uint32_t a = shoal_f32_bits(amax) & 0x7fffffffu;
    if (a > SHOAL_INT8_INF_BITS) {
        p.scale = shoal_bits_f32(SHOAL_INT8_NAN_BITS);
        p.finite = 0;
    } else if (a == SHOAL_INT8_INF_BITS) {
        p.scale = shoal_bits_f32(SHOAL_INT8_INF_BITS);
        p.finite = 0;
    } else {
        p.scale = shoal_codec_div(amax, SHOAL_INT8_QMAX);
        /* One ulp lower where 127 * scale would round to infinity, so that
         * every code decodes to a finite value. */
        if ((shoal_f32_bits(shoal_codec_mul(SHOAL_INT8_QMAX, p.scale)) & 0x7fffffffu) ==
            SHOAL_INT8_INF_BITS)
            p.scale = shoal_bits_f32(shoal_f32_bits(p.scale) - 1);
        if (amax >= SHOAL_INT8_TINY) {
            p.inv = shoal_codec_div(SHOAL_INT8_QMAX, amax);
        } else if (p.scale != 0.0f) {
            p.pre = SHOAL_INT8_PRE_TINY;
            p.inv = shoal_codec_div(SHOAL_INT8_QMAX, shoal_codec_mul(amax, p.pre));
        }
    }
    return p;
}

/* Scales sit at any alignment on the wire: through memcpy. */
static inline SHOAL_HD float shoal_int8_scale_get(const unsigned char *wire, size_t b)
{
    float s;
    memcpy(&s, wire + b * SHOAL_INT8_SCALE_BYTES, sizeof(s));
    return s;
}

static inline SHOAL_HD void shoal_int8_scale_set(unsigned char *wire, size_t b, float s)
{
    memcpy(wire + b * SHOAL_INT8_SCALE_BYTES, &s, sizeof(s));
}

/* max |x| over n values, NaN when one of them is NaN. */
static inline SHOAL_HD float shoal_int8_amax(const float *x, size_t n)
{
    float amax = 0.0f;
    int nan = 0;
    for (size_t i = 0; i < n; i++) {
        if ((shoal_f32_bits(x[i]) & 0x7fffffffu) > SHOAL_INT8_INF_BITS)
            nan = 1;
        else if (fabsf(x[i]) > amax)
            amax = fabsf(x[i]);
    }
    return nan ? shoal_bits_f32(SHOAL_INT8_NAN_BITS) : amax;
}

/* The code of x in a finite block with parameters p; u is the value's
 * uniform number (unused by nearest rounding). */
static inline SHOAL_HD int8_t shoal_int8_code(float x, const shoal_int8_params_t *p,
                                              shoal_round_t round, float u)
{
    float y = shoal_codec_mul(shoal_codec_mul(x, p->pre), p->inv);
    float q;
    if (round == SHOAL_ROUND_NEAREST) {
        q = nearbyintf(y);
    } else {
        float fl = floorf(y);
        q = y - fl >= 1.0f - u ? fl + 1.0f : fl;
    }
    if (q > SHOAL_INT8_QMAX)
        q = SHOAL_INT8_QMAX;
    if (q < -SHOAL_INT8_QMAX)
        q = -SHOAL_INT8_QMAX;
    return (int8_t)q;
}

static inline SHOAL_HD float shoal_int8_decode_value(int8_t code, float scale)
{
    return shoal_codec_mul((float)code, scale);
}

/* Encode the n values of x, the first of index `index` in the tensor, into
 * block b of the wire (its scale) and codes (the block's codes). */
static inline SHOAL_HD void shoal_int8_block_encode(unsigned char *wire, int8_t *codes, size_t b,
                                                    const float *x, float *res, size_t n,
                                                    shoal_round_t round, uint32_t key,
                                                    uint64_t index)
{
    shoal_int8_params_t p = shoal_int8_params(shoal_int8_amax(x, n));
    shoal_int8_scale_set(wire, b, p.scale);
    for (size_t i = 0; i < n; i++) {
        if (!p.finite) {
            codes[i] = 0;
            if (res)
                res[i] = shoal_bits_f32(SHOAL_INT8_NAN_BITS);
            continue;
        }
        float u = round == SHOAL_ROUND_STOCHASTIC ? shoal_codec_uniform(key, index + i) : 0.0f;
        codes[i] = shoal_int8_code(x[i], &p, round, u);
        if (res)
            res[i] = x[i] - shoal_int8_decode_value(codes[i], p.scale);
    }
}

/* Values in block b of a run of count values: its first and how many. */
static inline SHOAL_HD size_t shoal_int8_block_len(size_t count, size_t block, size_t b)
{
    size_t base = b * block;
    return count - base < block ? count - base : block;
}

/* Block b of encode over a run (codec.h's encode): x = src (+ add), the
 * sums formed on the stack before the block's residual is written, so
 * that res may be add. Blocks are independent: any order, any thread. */
static inline SHOAL_HD void shoal_int8_encode_block_of(unsigned char *wire, const float *src,
                                                       const float *add, float *res,
                                                       size_t count, size_t block,
                                                       shoal_round_t round, uint32_t key,
                                                       size_t first, size_t b)
{
    int8_t *codes = (int8_t *)(wire + shoal_int8_nblocks(count, block) * SHOAL_INT8_SCALE_BYTES);
    size_t base = b * block, n = shoal_int8_block_len(count, block, b);
    float s[SHOAL_INT8_MAX_BLOCK];
    const float *x = src + base;
    if (add) {
        for (size_t i = 0; i < n; i++)
            s[i] = src[base + i] + add[base + i];
        x = s;
    }
    shoal_int8_block_encode(wire, codes + base, b, x, res ? res + base : NULL, n, round, key,
                            (uint64_t)first + base);
}

static inline SHOAL_HD void shoal_int8_decode_block_of(float *dst, const unsigned char *wire,
                                                       size_t count, size_t block, size_t b)
{
    const int8_t *codes =
        (const int8_t *)(wire + shoal_int8_nblocks(count, block) * SHOAL_INT8_SCALE_BYTES);
    size_t base = b * block, n = shoal_int8_block_len(count, block, b);
    float scale = shoal_int8_scale_get(wire, b);
    for (size_t i = 0; i < n; i++)
        dst[base + i] = shoal_int8_decode_value(codes[base + i], scale);
}

/* Block b of add_encode: s = decode(in) + (local (+ add)) on the stack,
 * then s encoded into out. The block of in (scale and codes) is read
 * whole before the same block of out is written: out may be in. */
static inline SHOAL_HD void shoal_int8_add_encode_block_of(unsigned char *out,
                                                           const unsigned char *in,
                                                           const float *local, const float *add,
                                                           float *res, size_t count,
                                                           size_t block, shoal_round_t round,
                                                           uint32_t key, size_t first, size_t b)
{
    size_t scale_bytes = shoal_int8_nblocks(count, block) * SHOAL_INT8_SCALE_BYTES;
    const int8_t *cin = (const int8_t *)(in + scale_bytes);
    int8_t *cout = (int8_t *)(out + scale_bytes);
    size_t base = b * block, n = shoal_int8_block_len(count, block, b);
    float scale = shoal_int8_scale_get(in, b);
    float s[SHOAL_INT8_MAX_BLOCK];
    for (size_t i = 0; i < n; i++) {
        float l = add ? local[base + i] + add[base + i] : local[base + i];
        s[i] = shoal_int8_decode_value(cin[base + i], scale) + l;
    }
    shoal_int8_block_encode(out, cout + base, b, s, res ? res + base : NULL, n, round, key,
                            (uint64_t)first + base);
}

#endif
