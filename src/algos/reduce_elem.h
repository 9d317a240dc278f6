/* The element operations of the reductions, shared by the host kernels
 * (reduce.c, which vectorises them) and the CUDA kernels (src/cuda/), which
 * compile them as __host__ __device__: both run this code, so the tests of
 * the host kernels against the scalar references (reduce.c) cover the
 * device's arithmetic too. Semantics: reduce.c's head comment. */
#ifndef SHOAL_REDUCE_ELEM_H
#define SHOAL_REDUCE_ELEM_H

#include "base/dtype.h"

#include <stdint.h>
#include <string.h>

#define SHOAL_INT_OPS(sfx, T, U)                                                               \
    static inline SHOAL_HD T shoal_sum_##sfx(T x, T y) { return (T)((U)x + (U)y); }            \
    static inline SHOAL_HD T shoal_prod_##sfx(T x, T y) { return (T)((U)x * (U)y); }           \
    static inline SHOAL_HD T shoal_max_##sfx(T x, T y) { return x > y ? x : y; }               \
    static inline SHOAL_HD T shoal_min_##sfx(T x, T y) { return x < y ? x : y; }              \
    static inline SHOAL_HD T shoal_band_##sfx(T x, T y) { return (T)(x & y); }                 \
    static inline SHOAL_HD T shoal_bor_##sfx(T x, T y) { return (T)(x | y); }                  \
    static inline SHOAL_HD T shoal_bxor_##sfx(T x, T y) { return (T)(x ^ y); }                 \
    static inline SHOAL_HD T shoal_land_##sfx(T x, T y) { return (T)((x != 0) & (y != 0)); }   \
    static inline SHOAL_HD T shoal_lor_##sfx(T x, T y) { return (T)((x != 0) | (y != 0)); }    \
    static inline SHOAL_HD T shoal_lxor_##sfx(T x, T y) { return (T)((x != 0) ^ (y != 0)); }

SHOAL_INT_OPS(i8, int8_t, uint8_t)
SHOAL_INT_OPS(u8, uint8_t, uint8_t)
SHOAL_INT_OPS(i32, int32_t, uint32_t)
SHOAL_INT_OPS(u32, uint32_t, uint32_t)
SHOAL_INT_OPS(i64, int64_t, uint64_t)
SHOAL_INT_OPS(u64, uint64_t, uint64_t)

/* MAX and MIN as selects over the bit patterns, so that they vectorize:
 * ordered and unequal operands compare; equal ones (only -0 and +0 differ
 * in bits) combine with AND for MAX and OR for MIN, which picks +0 or -0;
 * a NaN gives way to the other operand, and two NaNs OR together. */
#define SHOAL_FLOAT_OPS(sfx, T, B)                                                             \
    static inline SHOAL_HD B shoal_reduce_bits_##sfx(T x)                                      \
    {                                                                                          \
        B u;                                                                                   \
        memcpy(&u, &x, sizeof(u));                                                             \
        return u;                                                                              \
    }                                                                                          \
    static inline SHOAL_HD T shoal_reduce_value_##sfx(B u)                                     \
    {                                                                                          \
        T x;                                                                                   \
        memcpy(&x, &u, sizeof(x));                                                             \
        return x;                                                                              \
    }                                                                                          \
    static inline SHOAL_HD T shoal_sum_##sfx(T x, T y) { return x + y; }                       \
    static inline SHOAL_HD T shoal_prod_##sfx(T x, T y) { return x * y; }                      \
    static inline SHOAL_HD T shoal_max_##sfx(T x, T y)                                         \
    {                                                                                          \
        B ux = shoal_reduce_bits_##sfx(x), uy = shoal_reduce_bits_##sfx(y);                    \
        B r = x > y ? ux : uy;                                                                 \
        r = x == y ? (ux & uy) : r;                                                            \
        r = y != y ? (x != x ? (ux | uy) : ux) : r;                                            \
        return shoal_reduce_value_##sfx(r);                                                    \
    }                                                                                          \
    static inline SHOAL_HD T shoal_min_##sfx(T x, T y)                                         \
    {                                                                                          \
        B ux = shoal_reduce_bits_##sfx(x), uy = shoal_reduce_bits_##sfx(y);                    \
        B r = x < y ? ux : uy;                                                                 \
        r = x == y ? (ux | uy) : r;                                                            \
        r = y != y ? (x != x ? (ux | uy) : ux) : r;                                            \
        return shoal_reduce_value_##sfx(r);                                                    \
    }

SHOAL_FLOAT_OPS(f32, float, uint32_t)
SHOAL_FLOAT_OPS(f64, double, uint64_t)

#endif
