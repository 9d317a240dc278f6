/* Element math of the ternary codec (compress/ternary.c, whose head
 * comment defines the codes, the shared scales, the wire forms and the
 * residuals): the scale of a value, its code, its decoded value, the
 * saturating sum of add_encode, the wire's values in each form, a
 * block's largest magnitude (the shared scales' inputs) and a block's
 * sum and sum of squared deviations (the clipping bound's inputs). The
 * CPU's scalar reference path calls these functions value by value, and
 * so does the CUDA module's codec kernel (cuda/kern.h), compiled there as
 * __host__ __device__, so that the tests of the reference check the
 * device's arithmetic. ternary.c's SIMD kernels compute the same IEEE
 * operations in their own loops (their tests compare them to these).
 *
 * The one division and the products go through shoal_codec_div and
 * shoal_codec_mul (never fused); fabsf is exact on host and device. The
 * moments' squares go through shoal_codec_dmul for the same reason. */
#ifndef SHOAL_COMPRESS_TERNARY_ELEM_H
#define SHOAL_COMPRESS_TERNARY_ELEM_H

#include "base/dtype.h"
#include "compress/codec.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Saturation bounds of the wire's sums, symmetric so that negating every
 * input negates the result; the packed wire's bound is applied when its
 * codes are packed (ternary.c, "the packed wire"). */
#define SHOAL_TERNARY_MAX8 127
#define SHOAL_TERNARY_MAX16 32767
#define SHOAL_TERNARY_MAX4 7

/* The SIMD kernels need the wire accessors inlined into each of their
 * per-target builds, where the host compilers might otherwise decline. */
#if defined(__GNUC__) && !defined(__CUDACC__)
#define SHOAL_TERNARY_ELEM_INLINE static inline SHOAL_HD __attribute__((always_inline))
#else
#define SHOAL_TERNARY_ELEM_INLINE static inline SHOAL_HD
#endif

/* Wire values through memcpy, so that an int16 wire may sit at any
 * address; compilers turn these into plain (vector) loads and stores. */
SHOAL_TERNARY_ELEM_INLINE int32_t shoal_ternary_load(const unsigned char *w, size_t i, int wide)
{
    if (wide) {
        int16_t v;
        memcpy(&v, w + 2 * i, sizeof(v));
        return v;
    }
    return (int8_t)w[i];
}

SHOAL_TERNARY_ELEM_INLINE void shoal_ternary_store(unsigned char *w, size_t i, int32_t v,
                                                   int wide)
{
    if (wide) {
        int16_t s = (int16_t)v;
        memcpy(w + 2 * i, &s, sizeof(s));
    } else {
        w[i] = (unsigned char)(int8_t)v;
    }
}

/* Value i of the packed wire: 4 bits, value 2j in the low half of byte j,
 * sign-extended. */
static inline SHOAL_HD int32_t shoal_ternary_nibble_get(const unsigned char *w, size_t i)
{
    int32_t v = i % 2 ? w[i / 2] >> 4 : w[i / 2] & 0xf;
    return (v ^ 8) - 8;
}

/* The packed byte of the codes lo (value 2j) and hi (value 2j + 1), each
 * clamped to the 4 bits' +-7. */
static inline SHOAL_HD unsigned char shoal_ternary_nibble_pair(int32_t lo, int32_t hi)
{
    lo = lo > SHOAL_TERNARY_MAX4 ? SHOAL_TERNARY_MAX4 : lo;
    lo = lo < -SHOAL_TERNARY_MAX4 ? -SHOAL_TERNARY_MAX4 : lo;
    hi = hi > SHOAL_TERNARY_MAX4 ? SHOAL_TERNARY_MAX4 : hi;
    hi = hi < -SHOAL_TERNARY_MAX4 ? -SHOAL_TERNARY_MAX4 : hi;
    return (unsigned char)((lo & 0xf) | (hi & 0xf) << 4);
}

/* The shared scale of the value of index `index` of the tensor. */
static inline SHOAL_HD float shoal_ternary_scale_of(const float *scales, size_t block,
                                                    uint64_t index)
{
    return scales[index / block];
}

/* The largest |src[i] (+ add[i])| for i in [begin, end): one block's
 * shared scale before the max over the ranks (add NULL: src alone; else
 * the fp32 sum). NaN is ignored, as its comparison is false; 0 for no
 * numbers. */
static inline SHOAL_HD float shoal_ternary_block_absmax(const float *src, const float *add,
                                                        size_t begin, size_t end)
{
    float m = 0.0f;
    for (size_t i = begin; i < end; i++) {
        float x = add ? src[i] + add[i] : src[i];
        if (fabsf(x) > m)
            m = fabsf(x);
    }
    return m;
}

/* The moments of the values v_i = (double)(src[i] (+ add[i])) for i in
 * [begin, end) (add NULL: src alone; else the fp32 sum, then widened),
 * n = end - begin of them, begin < end: moments_p[0] = the sum of v_i and
 * moments_p[1] = the sum of (v_i - moments_p[0] / n)^2, each added from
 * 0.0 in the values' order, one rounding per operation, so that a host
 * model that adds in the same order gets the same bits. NaN and
 * infinities propagate. Both outputs are written after the values were
 * read. */
static inline SHOAL_HD void shoal_ternary_block_moments(const float *src, const float *add,
                                                        size_t begin, size_t end,
                                                        double *moments_p)
{
    double sum = 0.0, sq = 0.0;
    for (size_t i = begin; i < end; i++)
        sum += (double)(add ? src[i] + add[i] : src[i]);
    double mean = sum / (double)(end - begin);
    for (size_t i = begin; i < end; i++) {
        double dev = (double)(add ? src[i] + add[i] : src[i]) - mean;
        sq += shoal_codec_dmul(dev, dev);
    }
    moments_p[0] = sum;
    moments_p[1] = sq;
}

/* The code of value x of the block with this scale: sign(x) * up, with up
 * decided by p = |x| / scale clamped to 1 (x clipped to +-scale): p >= 0.5
 * for nearest rounding, u < p for stochastic with u the value's uniform
 * number. A scale that is not > 0 gives 0. */
static inline SHOAL_HD int32_t shoal_ternary_code(shoal_round_t round, uint32_t key, float x,
                                                  float scale, uint64_t index)
{
    if (!(scale > 0.0f))
        return 0;
    float p = shoal_codec_div(fabsf(x), scale);
    if (p > 1.0f)
        p = 1.0f;
    int up;
    if (round == SHOAL_ROUND_NEAREST)
        up = p >= 0.5f;
    else
        up = shoal_codec_uniform(key, index) < p;
    if (!up)
        return 0; /* 0 and NaN always end here: the sign is a number's */
    return x < 0.0f ? -1 : 1;
}

static inline SHOAL_HD float shoal_ternary_decode_value(int32_t code, float scale)
{
    return shoal_codec_mul((float)code, scale);
}

/* in + k within +-max, max the wire's bound. */
static inline SHOAL_HD int32_t shoal_ternary_add_sat(int32_t in, int32_t k, int32_t max)
{
    int32_t sum = in + k;
    if (sum > max)
        sum = max;
    if (sum < -max)
        sum = -max;
    return sum;
}

/* What the residual keeps of x: x - q * scale, q the code this call added
 * to the wire (encode: the code; add_encode: the change of the sum). */
static inline SHOAL_HD float shoal_ternary_residual(float x, int32_t q, float scale)
{
    return x - shoal_ternary_decode_value(q, scale);
}

#endif
