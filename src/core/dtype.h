/* Element types: sizes, names, and scalar conversions of the 16- and 8-bit
 * floating types through fp32 with round-to-nearest-even. The conversions are
 * static inline so later CUDA code can share them (SHOAL_HD). */
#ifndef SHOAL_DTYPE_H
#define SHOAL_DTYPE_H

#include "shoal.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SHOAL_HD __host__ __device__
#else
#define SHOAL_HD
#endif

/* 0 for an unknown dtype. */
size_t shoal_dtype_bytes(shoal_dtype_t dtype);
const char *shoal_dtype_name(shoal_dtype_t dtype);  /* "float", "half", ..., "?" */
const char *shoal_op_name(shoal_op_t op);           /* "sum", ..., "?" */

static inline SHOAL_HD uint32_t shoal_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline SHOAL_HD float shoal_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* bf16 is the top half of fp32: round the dropped 16 bits to nearest even. */
static inline SHOAL_HD float shoal_bf16_to_f32(uint16_t h)
{
    return shoal_bits_f32((uint32_t)h << 16);
}

static inline SHOAL_HD uint16_t shoal_f32_to_bf16(float f)
{
    uint32_t u = shoal_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Generic narrow float with e exponent bits and m mantissa bits (bias
 * 2^(e-1)-1) decoded to fp32. ieee_inf: top exponent means inf/NaN (fp16,
 * e5m2); otherwise only all-ones is NaN (e4m3fn) . */
static inline SHOAL_HD float shoal_narrow_to_f32(uint32_t v, int e, int m, int ieee_inf)
{
    uint32_t sign = (v >> (e + m)) & 1u;
    uint32_t exp = (v >> m) & ((1u << e) - 1u);
    uint32_t man = v & ((1u << m) - 1u);
    int bias = (1 << (e - 1)) - 1;
    uint32_t out;
    if (ieee_inf && exp == (1u << e) - 1u) {
        out = 0x7f800000u | (man ? 0x400000u : 0u);
    } else if (!ieee_inf && exp == (1u << e) - 1u && man == (1u << m) - 1u) {
        out = 0x7fc00000u;
    } else if (exp == 0) {
        if (man == 0) {
            out = 0;
        } else { /* subnormal: value = man * 2^(1-bias-m) */
            float f = (float)man;
            int shift = 1 - bias - m;
            while (shift < 0) { f *= 0.5f; shift++; }
            out = shoal_f32_bits(f);
        }
    } else {
        out = ((exp - (uint32_t)bias + 127u) << 23) | (man << (23 - m));
    }
    return shoal_bits_f32(out | (sign << 31));
}

/* fp32 to a narrow float, rounding to nearest even. Overflow gives inf where
 * the format has one (fp16, e5m2 when sat == 0); with sat, or for e4m3, the
 * largest finite value of that sign. NaN stays NaN. */
static inline SHOAL_HD uint32_t shoal_f32_to_narrow(float f, int e, int m, int ieee_inf, int sat)
{
    uint32_t u = shoal_f32_bits(f);
    uint32_t sign = (u >> 31) << (e + m);
    uint32_t absu = u & 0x7fffffffu;
    int bias = (1 << (e - 1)) - 1;
    uint32_t max_exp = ieee_inf ? (1u << e) - 2u : (1u << e) - 1u;
    uint32_t max_man = ieee_inf ? (1u << m) - 1u : (1u << m) - 2u;
    uint32_t max_finite = (max_exp << m) | max_man;
    uint32_t nan = ieee_inf ? (((1u << e) - 1u) << m) | (1u << (m - 1)) : (1u << (e + m)) - 1u;
    if (absu > 0x7f800000u)
        return sign | nan;
    if (absu == 0x7f800000u)
        return sign | ((ieee_inf && !sat) ? ((1u << e) - 1u) << m : max_finite);
    int exp = (int)(absu >> 23) - 127 + bias; /* biased target exponent */
    uint32_t man = (absu & 0x7fffffu) | 0x800000u; /* 24 bits with hidden one */
    if (absu < 0x800000u)
        return sign; /* fp32 subnormals are far below every narrow subnormal */
    int shift = 23 - m; /* bits to drop for a normal result */
    if (exp <= 0) {     /* narrow subnormal */
        shift += 1 - exp;
        exp = 0;
        if (shift > 24 + 1)
            return sign;
    }
    uint32_t kept = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (kept & 1u)))
        kept++;
    /* kept includes the hidden bit for normals; rebuild exponent+mantissa. */
    uint32_t r;
    if (exp == 0)
        r = kept; /* subnormal; a carry into 1<<m becomes the smallest normal */
    else
        r = ((uint32_t)exp << m) + (kept - (1u << m));
    if (r > max_finite)
        return sign | ((ieee_inf && !sat) ? ((1u << e) - 1u) << m : max_finite);
    return sign | r;
}

static inline SHOAL_HD float shoal_f16_to_f32(uint16_t h) { return shoal_narrow_to_f32(h, 5, 10, 1); }
static inline SHOAL_HD uint16_t shoal_f32_to_f16(float f) { return (uint16_t)shoal_f32_to_narrow(f, 5, 10, 1, 0); }
static inline SHOAL_HD float shoal_e4m3_to_f32(uint8_t v) { return shoal_narrow_to_f32(v, 4, 3, 0); }
static inline SHOAL_HD uint8_t shoal_f32_to_e4m3(float f) { return (uint8_t)shoal_f32_to_narrow(f, 4, 3, 0, 1); }
static inline SHOAL_HD float shoal_e5m2_to_f32(uint8_t v) { return shoal_narrow_to_f32(v, 5, 2, 1); }
static inline SHOAL_HD uint8_t shoal_f32_to_e5m2(float f) { return (uint8_t)shoal_f32_to_narrow(f, 5, 2, 1, 1); }

#endif
