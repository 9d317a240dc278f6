/* The CUDA module's kernels as plain functions over a range of elements:
 * kernels.cu wraps each in a __global__ grid-stride loop, and the tests'
 * CPU stand-in of the driver (tests/cuda/) runs the same functions over
 * the whole range when a kernel is launched. Each kernel takes one
 * argument, a struct passed by value (cuLaunchKernel's params[0]), and is
 * named by SHOAL_K_* for cuModuleGetFunction.
 *
 * The element math is algos/reduce_elem.h and base/dtype.h, and for the
 * codec kernel compress/int8_elem.h and compress/ternary_elem.h: the host
 * kernels' own functions, so results are bitwise those of the host path. */
#ifndef SHOAL_CUDA_KERN_H
#define SHOAL_CUDA_KERN_H

#include "algos/reduce_elem.h"
#include "base/dev_ops.h"
#include "base/dtype.h"
#include "compress/int8_elem.h"
#include "compress/psgd_elem.h"
#include "compress/ternary_elem.h"

#include <stdint.h>

#define SHOAL_K_REDUCE "shoal_k_reduce"
#define SHOAL_K_AVG "shoal_k_avg"
#define SHOAL_K_WAIT "shoal_k_wait"
#define SHOAL_K_WRITE "shoal_k_write"
#define SHOAL_K_CODEC "shoal_k_codec"
#define SHOAL_K_CONVERT "shoal_k_convert"
#define SHOAL_K_ORTHO "shoal_k_ortho"

/* dst[i] = a[i] op b[i]; AVG is SUM. */
typedef struct {
    void *dst;
    const void *a, *b;
    uint64_t count;
    int32_t dtype, op;
} shoal_k_reduce_t;

/* dst[i] = src[i] / n. */
typedef struct {
    void *dst;
    const void *src;
    uint64_t count;
    int32_t dtype, n;
} shoal_k_avg_t;

/* dst[i] = src[i] converted from src_dtype to dst_dtype (dev_ops.h's
 * convert entry). */
typedef struct {
    void *dst;
    const void *src;
    uint64_t count;
    int32_t dst_dtype, src_dtype;
} shoal_k_convert_t;

/* SHOAL_K_WAIT: one thread waits until (int32_t)(*flag - value) >= 0;
 * SHOAL_K_WRITE: one thread stores value into *flag after a system-wide
 * fence. What stands in for stream memory operations on devices without
 * them. */
typedef struct {
    volatile uint32_t *flag;
    uint32_t value;
} shoal_k_wait_t;

/* One codec operation (dev_ops.h's codec entry), with its args' fields:
 * op a shoal_dev_codec_op_t, kind a shoal_dev_codec_kind_t, round a
 * shoal_round_t. */
typedef struct {
    void *wire_out;
    const void *wire_in;
    const float *src, *addend;
    float *residual, *dst;
    const float *scales;
    uint64_t seed, step;
    uint64_t count, first, block;
    int32_t op, kind, round, wide, packed;
} shoal_k_codec_t;

/* PowerSGD's orthonormalisation of ntensors factors (dev_ops.h's
 * orthonormalise entry): tensor t is the record desc[t] (device memory),
 * which names P_t in p and its column of scratch in col. */
typedef struct {
    float *p;
    double *col;
    const shoal_dev_psgd_desc_t *desc;
    uint64_t ntensors;
} shoal_k_ortho_t;

#define SHOAL_K_RANGE_INT(T, fn)                                                       \
    {                                                                                  \
        T *d = (T *)k->dst;                                                            \
        const T *x = (const T *)k->a, *y = (const T *)k->b;                            \
        for (uint64_t i = begin; i < end; i += step)                                   \
            d[i] = fn(x[i], y[i]);                                                     \
    }

#define SHOAL_K_RANGE_NARROW(T, dec, enc, fn)                                          \
    {                                                                                  \
        T *d = (T *)k->dst;                                                            \
        const T *x = (const T *)k->a, *y = (const T *)k->b;                            \
        for (uint64_t i = begin; i < end; i += step)                                   \
            d[i] = enc(fn(dec(x[i]), dec(y[i])));                                      \
    }

#define SHOAL_K_OPS(sfx, T)                                                            \
    switch (op) {                                                                      \
    case SHOAL_PROD: SHOAL_K_RANGE_INT(T, shoal_prod_##sfx) break;                     \
    case SHOAL_MAX: SHOAL_K_RANGE_INT(T, shoal_max_##sfx) break;                       \
    case SHOAL_MIN: SHOAL_K_RANGE_INT(T, shoal_min_##sfx) break;                       \
    default: SHOAL_K_RANGE_INT(T, shoal_sum_##sfx) break;                              \
    }

#define SHOAL_K_NARROW_OPS(T, dec, enc)                                                \
    switch (op) {                                                                      \
    case SHOAL_PROD: SHOAL_K_RANGE_NARROW(T, dec, enc, shoal_prod_f32) break;          \
    case SHOAL_MAX: SHOAL_K_RANGE_NARROW(T, dec, enc, shoal_max_f32) break;            \
    case SHOAL_MIN: SHOAL_K_RANGE_NARROW(T, dec, enc, shoal_min_f32) break;            \
    default: SHOAL_K_RANGE_NARROW(T, dec, enc, shoal_sum_f32) break;                   \
    }

/* Elements begin, begin + step, ... below end. The dtype and op switches
 * are uniform across threads and sit outside the loops. */
static inline SHOAL_HD void shoal_k_reduce_range(const shoal_k_reduce_t *k, uint64_t begin,
                                                 uint64_t end, uint64_t step)
{
    int op = k->op;
    switch (k->dtype) {
    case SHOAL_INT8: SHOAL_K_OPS(i8, int8_t) break;
    case SHOAL_UINT8: SHOAL_K_OPS(u8, uint8_t) break;
    case SHOAL_INT32: SHOAL_K_OPS(i32, int32_t) break;
    case SHOAL_UINT32: SHOAL_K_OPS(u32, uint32_t) break;
    case SHOAL_INT64: SHOAL_K_OPS(i64, int64_t) break;
    case SHOAL_UINT64: SHOAL_K_OPS(u64, uint64_t) break;
    case SHOAL_FLOAT32: SHOAL_K_OPS(f32, float) break;
    case SHOAL_FLOAT64: SHOAL_K_OPS(f64, double) break;
    case SHOAL_FLOAT16: SHOAL_K_NARROW_OPS(uint16_t, shoal_f16_to_f32, shoal_f32_to_f16) break;
    case SHOAL_BFLOAT16: SHOAL_K_NARROW_OPS(uint16_t, shoal_bf16_to_f32, shoal_f32_to_bf16) break;
    case SHOAL_FP8_E4M3: SHOAL_K_NARROW_OPS(uint8_t, shoal_e4m3_to_f32, shoal_f32_to_e4m3) break;
    case SHOAL_FP8_E5M2: SHOAL_K_NARROW_OPS(uint8_t, shoal_e5m2_to_f32, shoal_f32_to_e5m2) break;
    default: break;
    }
}

#define SHOAL_K_AVG_INT(T, D)                                                          \
    {                                                                                  \
        T *d = (T *)k->dst;                                                            \
        const T *s = (const T *)k->src;                                                \
        for (uint64_t i = begin; i < end; i += step)                                   \
            d[i] = (T)((D)s[i] / (D)k->n);                                             \
    }

#define SHOAL_K_AVG_FLOAT(T, A, dec, enc)                                              \
    {                                                                                  \
        T *d = (T *)k->dst;                                                            \
        const T *s = (const T *)k->src;                                                \
        const A inv = (A)1 / (A)k->n;                                                  \
        for (uint64_t i = begin; i < end; i += step)                                   \
            d[i] = enc(dec(s[i]) * inv);                                               \
    }

#define SHOAL_K_SAME(x) (x)

/* As shoal_avg_finish: integers divide (truncating), floats multiply by
 * 1/n in their accumulation type. n < 1 leaves dst alone. */
static inline SHOAL_HD void shoal_k_avg_range(const shoal_k_avg_t *k, uint64_t begin,
                                              uint64_t end, uint64_t step)
{
    if (k->n < 1)
        return;
    switch (k->dtype) {
    case SHOAL_INT8: SHOAL_K_AVG_INT(int8_t, int) break;
    case SHOAL_UINT8: SHOAL_K_AVG_INT(uint8_t, int) break;
    case SHOAL_INT32: SHOAL_K_AVG_INT(int32_t, int32_t) break;
    case SHOAL_UINT32: SHOAL_K_AVG_INT(uint32_t, uint32_t) break;
    case SHOAL_INT64: SHOAL_K_AVG_INT(int64_t, int64_t) break;
    case SHOAL_UINT64: SHOAL_K_AVG_INT(uint64_t, uint64_t) break;
    case SHOAL_FLOAT32: SHOAL_K_AVG_FLOAT(float, float, SHOAL_K_SAME, SHOAL_K_SAME) break;
    case SHOAL_FLOAT64: SHOAL_K_AVG_FLOAT(double, double, SHOAL_K_SAME, SHOAL_K_SAME) break;
    case SHOAL_FLOAT16: SHOAL_K_AVG_FLOAT(uint16_t, float, shoal_f16_to_f32, shoal_f32_to_f16) break;
    case SHOAL_BFLOAT16: SHOAL_K_AVG_FLOAT(uint16_t, float, shoal_bf16_to_f32, shoal_f32_to_bf16) break;
    case SHOAL_FP8_E4M3: SHOAL_K_AVG_FLOAT(uint8_t, float, shoal_e4m3_to_f32, shoal_f32_to_e4m3) break;
    case SHOAL_FP8_E5M2: SHOAL_K_AVG_FLOAT(uint8_t, float, shoal_e5m2_to_f32, shoal_f32_to_e5m2) break;
    default: break;
    }
}

/* Bytes of one element of a type the convert kernel takes (float32,
 * float16, bfloat16, fp8 e4m3 and e5m2); 0 for any other. */
static inline SHOAL_HD uint32_t shoal_k_convert_bytes(int32_t dtype)
{
    switch (dtype) {
    case SHOAL_FLOAT32: return 4;
    case SHOAL_FLOAT16:
    case SHOAL_BFLOAT16: return 2;
    case SHOAL_FP8_E4M3:
    case SHOAL_FP8_E5M2: return 1;
    default: return 0;
    }
}

#define SHOAL_K_CONVERT_LOOP(S, dec, D, enc)                                           \
    {                                                                                  \
        D *d = (D *)k->dst;                                                            \
        const S *s = (const S *)k->src;                                                \
        for (uint64_t i = begin; i < end; i += step)                                   \
            d[i] = enc(dec(s[i]));                                                     \
    }

/* From a source type, decoded by dec, to each destination type. */
#define SHOAL_K_CONVERT_TO(S, dec)                                                        \
    switch (k->dst_dtype) {                                                               \
    case SHOAL_FLOAT32: SHOAL_K_CONVERT_LOOP(S, dec, float, SHOAL_K_SAME) break;          \
    case SHOAL_FLOAT16: SHOAL_K_CONVERT_LOOP(S, dec, uint16_t, shoal_f32_to_f16) break;   \
    case SHOAL_BFLOAT16: SHOAL_K_CONVERT_LOOP(S, dec, uint16_t, shoal_f32_to_bf16) break; \
    case SHOAL_FP8_E4M3: SHOAL_K_CONVERT_LOOP(S, dec, uint8_t, shoal_f32_to_e4m3) break;  \
    case SHOAL_FP8_E5M2: SHOAL_K_CONVERT_LOOP(S, dec, uint8_t, shoal_f32_to_e5m2) break;  \
    default: break;                                                                       \
    }

/* Through float32 with base/dtype.h's conversions, as the host converts.
 * The same type on both sides copies the bits: a round trip through
 * float32 would quiet a signalling NaN. The dtype switches are uniform
 * across threads and sit outside the loops; a type the entry would refuse
 * does nothing here. */
static inline SHOAL_HD void shoal_k_convert_range(const shoal_k_convert_t *k, uint64_t begin,
                                                  uint64_t end, uint64_t step)
{
    if (k->dst_dtype == k->src_dtype) {
        switch (shoal_k_convert_bytes(k->src_dtype)) {
        case 4: SHOAL_K_CONVERT_LOOP(uint32_t, SHOAL_K_SAME, uint32_t, SHOAL_K_SAME) break;
        case 2: SHOAL_K_CONVERT_LOOP(uint16_t, SHOAL_K_SAME, uint16_t, SHOAL_K_SAME) break;
        case 1: SHOAL_K_CONVERT_LOOP(uint8_t, SHOAL_K_SAME, uint8_t, SHOAL_K_SAME) break;
        default: break;
        }
        return;
    }
    switch (k->src_dtype) {
    case SHOAL_FLOAT32: SHOAL_K_CONVERT_TO(float, SHOAL_K_SAME) break;
    case SHOAL_FLOAT16: SHOAL_K_CONVERT_TO(uint16_t, shoal_f16_to_f32) break;
    case SHOAL_BFLOAT16: SHOAL_K_CONVERT_TO(uint16_t, shoal_bf16_to_f32) break;
    case SHOAL_FP8_E4M3: SHOAL_K_CONVERT_TO(uint8_t, shoal_e4m3_to_f32) break;
    case SHOAL_FP8_E5M2: SHOAL_K_CONVERT_TO(uint8_t, shoal_e5m2_to_f32) break;
    default: break;
    }
}

/* The codec kernel works in units of block values counted from the run's
 * start, and one unit is one thread's (correctness first: a block's amax
 * and codes come from one thread's loop, as in the host's reference, not
 * from a cooperative reduction across threads). For int8 a unit is a
 * codec block, which its scale makes indivisible; ternary values are
 * independent, and its units are runs of the same length, even (whole
 * bytes of the packed wire) and aligned with int8's. ABSMAX's and
 * MOMENTS' unit is a codec block too, for either kind: their outputs are
 * the block's, each a sequential sum over its values. */
static inline SHOAL_HD uint64_t shoal_k_codec_units(const shoal_k_codec_t *k)
{
    if (k->block != 32 && k->block != 64 && k->block != 128)
        return 0;
    return k->count / k->block + (k->count % k->block != 0);
}

/* Value i of a ternary encode or add_encode (in: its incoming code, 0 for
 * encode): the code it leaves on the wire, before the packed wire's
 * clamp, with its residual written (after its addend was read). */
static inline SHOAL_HD int32_t shoal_k_ternary_one(const shoal_k_codec_t *k, uint32_t key,
                                                   uint64_t i, int32_t in, int32_t max)
{
    float x = k->addend ? k->src[i] + k->addend[i] : k->src[i];
    uint64_t index = k->first + i;
    float scale = shoal_ternary_scale_of(k->scales, (size_t)k->block, index);
    int32_t code = shoal_ternary_code((shoal_round_t)k->round, key, x, scale, index);
    int32_t out = k->op == SHOAL_DEV_CODEC_ADD_ENCODE ? shoal_ternary_add_sat(in, code, max) : code;
    if (k->residual)
        k->residual[i] = shoal_ternary_residual(x, out - in, scale);
    return out;
}

/* Unit u of a ternary operation. The packed wire's codes are those of the
 * 8-bit wire (ternary.c computes it so), clamped to +-7 when a pair is
 * packed; both codes of a byte are read before it is written, so
 * wire_out may be wire_in. */
static inline SHOAL_HD void shoal_k_ternary_unit(const shoal_k_codec_t *k, uint32_t key,
                                                 uint64_t u)
{
    const unsigned char *in = (const unsigned char *)k->wire_in;
    unsigned char *out = (unsigned char *)k->wire_out;
    uint64_t lo = u * k->block, hi = lo + k->block < k->count ? lo + k->block : k->count;
    int wide = k->wide != 0, decode = k->op == SHOAL_DEV_CODEC_DECODE,
        add = k->op == SHOAL_DEV_CODEC_ADD_ENCODE;
    int32_t max = wide ? SHOAL_TERNARY_MAX16 : SHOAL_TERNARY_MAX8;
    if (k->packed) {
        for (uint64_t i = lo; i < hi; i += 2) {
            int pair = i + 1 < hi;
            if (decode) {
                for (uint64_t j = i; j < i + 1 + (uint64_t)pair; j++)
                    k->dst[j] = shoal_ternary_decode_value(
                        shoal_ternary_nibble_get(in, (size_t)j),
                        shoal_ternary_scale_of(k->scales, (size_t)k->block, k->first + j));
                continue;
            }
            int32_t in0 = add ? shoal_ternary_nibble_get(in, (size_t)i) : 0;
            int32_t in1 = add && pair ? shoal_ternary_nibble_get(in, (size_t)i + 1) : 0;
            int32_t c0 = shoal_k_ternary_one(k, key, i, in0, max);
            int32_t c1 = pair ? shoal_k_ternary_one(k, key, i + 1, in1, max) : 0;
            out[i / 2] = shoal_ternary_nibble_pair(c0, c1);
        }
        return;
    }
    for (uint64_t i = lo; i < hi; i++) {
        if (decode) {
            k->dst[i] = shoal_ternary_decode_value(
                shoal_ternary_load(in, (size_t)i, wide),
                shoal_ternary_scale_of(k->scales, (size_t)k->block, k->first + i));
            continue;
        }
        int32_t w = add ? shoal_ternary_load(in, (size_t)i, wide) : 0;
        shoal_ternary_store(out, (size_t)i, shoal_k_ternary_one(k, key, i, w, max), wide);
    }
}

/* Units begin, begin + step, ... below end (at most
 * shoal_k_codec_units). The op and kind switches are uniform across
 * threads. A codec the entry would refuse does nothing here. ABSMAX
 * writes dst[u], the largest magnitude of unit u's values, and MOMENTS
 * ((double *)wire_out)[2 u] and [2 u + 1], their sum and sum of squared
 * deviations, whatever the kind. */
static inline SHOAL_HD void shoal_k_codec_range(const shoal_k_codec_t *k, uint64_t begin,
                                                uint64_t end, uint64_t step)
{
    if (k->block != 32 && k->block != 64 && k->block != 128)
        return;
    const uint32_t key = shoal_codec_key(k->seed, k->step);
    const size_t count = (size_t)k->count, block = (size_t)k->block, first = (size_t)k->first;
    const shoal_round_t round = (shoal_round_t)k->round;
    for (uint64_t u = begin; u < end; u += step) {
        if (k->op == SHOAL_DEV_CODEC_ABSMAX) {
            /* The run's block u is the tensor's block first / block + u:
             * the entry takes only runs that start on a block. */
            uint64_t lo = u * k->block, hi = lo + k->block < k->count ? lo + k->block : k->count;
            k->dst[u] = shoal_ternary_block_absmax(k->src, k->addend, (size_t)lo, (size_t)hi);
            continue;
        }
        if (k->op == SHOAL_DEV_CODEC_MOMENTS) {
            /* As ABSMAX: the run's block u is one of the tensor's. */
            uint64_t lo = u * k->block, hi = lo + k->block < k->count ? lo + k->block : k->count;
            shoal_ternary_block_moments(k->src, k->addend, (size_t)lo, (size_t)hi,
                                        (double *)k->wire_out + 2 * u);
            continue;
        }
        if (k->kind == SHOAL_DEV_CODEC_TERNARY) {
            shoal_k_ternary_unit(k, key, u);
            continue;
        }
        switch (k->op) {
        case SHOAL_DEV_CODEC_ENCODE:
            shoal_int8_encode_block_of((unsigned char *)k->wire_out, k->src, k->addend,
                                       k->residual, count, block, round, key, first, (size_t)u);
            break;
        case SHOAL_DEV_CODEC_ADD_ENCODE:
            shoal_int8_add_encode_block_of((unsigned char *)k->wire_out,
                                           (const unsigned char *)k->wire_in, k->src, k->addend,
                                           k->residual, count, block, round, key, first,
                                           (size_t)u);
            break;
        default:
            shoal_int8_decode_block_of(k->dst, (const unsigned char *)k->wire_in, count, block,
                                       (size_t)u);
            break;
        }
    }
}

/* Tensors begin, begin + step, ... below end (at most ntensors), each
 * orthonormalised whole by one thread: the columns' dot products are
 * sums in a fixed order, which is what makes the bits the host's. */
static inline SHOAL_HD void shoal_k_ortho_range(const shoal_k_ortho_t *k, uint64_t begin,
                                               uint64_t end, uint64_t step)
{
    for (uint64_t t = begin; t < end; t += step) {
        const shoal_dev_psgd_desc_t *d = &k->desc[t];
        shoal_psgd_orthonormalise(k->p + d->off, (size_t)d->rows, (size_t)d->rank,
                                  k->col + d->col);
    }
}

#endif
