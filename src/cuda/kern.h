/* The CUDA module's kernels as plain functions over a range of elements:
 * kernels.cu wraps each in a __global__ grid-stride loop, and the tests'
 * CPU stand-in of the driver (tests/cuda/) runs the same functions over
 * the whole range when a kernel is launched. Each kernel takes one
 * argument, a struct passed by value (cuLaunchKernel's params[0]), and is
 * named by SHOAL_K_* for cuModuleGetFunction.
 *
 * The element math is algos/reduce_elem.h and base/dtype.h: the host
 * kernels' own functions, so results are bitwise those of the host path. */
#ifndef SHOAL_CUDA_KERN_H
#define SHOAL_CUDA_KERN_H

#include "algos/reduce_elem.h"
#include "base/dtype.h"

#include <stdint.h>

#define SHOAL_K_REDUCE "shoal_k_reduce"
#define SHOAL_K_AVG "shoal_k_avg"
#define SHOAL_K_WAIT "shoal_k_wait"
#define SHOAL_K_WRITE "shoal_k_write"

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

/* SHOAL_K_WAIT: one thread waits until (int32_t)(*flag - value) >= 0;
 * SHOAL_K_WRITE: one thread stores value into *flag after a system-wide
 * fence. What stands in for stream memory operations on devices without
 * them. */
typedef struct {
    volatile uint32_t *flag;
    uint32_t value;
} shoal_k_wait_t;

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

#endif
