/* Element types: sizes, names, and scalar conversions of the 16- and 8-bit
 * floating types through fp32 with round-to-nearest-even. The conversions are
 * static inline so later CUDA code can share them (SHOAL_HD).
 *
 * The conversions are written without branches: every case is computed and
 * the right one chosen by a select. Inlined with constant format parameters,
 * a loop of them auto-vectorizes (the reduction kernels rely on this). They
 * assume the default floating-point environment: round to nearest, and fp32
 * subnormal inputs may be flushed to zero (they round to zero in every narrow
 * format anyway). */
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

/* The integer types, which alone take the bitwise and logical ops. */
static inline SHOAL_HD int shoal_dtype_is_int(shoal_dtype_t dtype)
{
    return dtype == SHOAL_INT8 || dtype == SHOAL_UINT8 || dtype == SHOAL_INT32 ||
           dtype == SHOAL_UINT32 || dtype == SHOAL_INT64 || dtype == SHOAL_UINT64;
}

/* SHOAL_BAND .. SHOAL_LXOR. */
static inline SHOAL_HD int shoal_op_is_bitop(shoal_op_t op)
{
    return (int)op >= SHOAL_BAND && (int)op < SHOAL_BITOP_END;
}

/* An op in one byte, for a collective's signature: the built-in ops as
 * they are, the bitwise and logical ones from SHOAL_SIG_BITOP up. */
#define SHOAL_SIG_BITOP 0x80
static inline uint8_t shoal_op_sig_code(shoal_op_t op)
{
    return shoal_op_is_bitop(op) ? (uint8_t)(SHOAL_SIG_BITOP + (op - SHOAL_BAND)) : (uint8_t)op;
}
static inline shoal_op_t shoal_op_of_sig_code(uint8_t code)
{
    return code >= SHOAL_SIG_BITOP ? (shoal_op_t)(SHOAL_BAND + (code - SHOAL_SIG_BITOP))
                                   : (shoal_op_t)code;
}

/* 0 for an unknown dtype. */
size_t shoal_dtype_bytes(shoal_dtype_t dtype);
const char *shoal_dtype_name(shoal_dtype_t dtype);  /* "float", "half", ..., "?" */
const char *shoal_op_name(shoal_op_t op);           /* "sum", ..., "?" */

/* Element i of buf (of dtype) = v, converted as a C cast would (narrow
 * floats round to nearest even). For tests and the benchmark's inputs. */
void shoal_dtype_set_f64(void *buf, size_t i, shoal_dtype_t dtype, double v);

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

/* bf16 is the top half of fp32. */
static inline SHOAL_HD float shoal_bf16_to_f32(uint16_t h)
{
    return shoal_bits_f32((uint32_t)h << 16);
}

/* Round the dropped 16 bits to nearest even; a carry out of the mantissa
 * correctly bumps the exponent, up to infinity. NaN stays a quiet NaN with
 * its sign and the top of its payload, as fp16 conversions in hardware do
 * (the plain rounding could turn a NaN with a small payload into
 * infinity). */
static inline SHOAL_HD uint16_t shoal_f32_to_bf16(float f)
{
    uint32_t u = shoal_f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* Generic narrow float with e exponent bits and m mantissa bits (bias
 * 2^(e-1)-1) decoded to fp32, exactly. ieee_inf: the top exponent means
 * inf/NaN (fp16, e5m2), and a NaN comes out quiet with its payload, as x86's
 * vcvtph2ps does; otherwise only all-ones exponent and mantissa is NaN
 * (e4m3fn), decoded as the default quiet NaN with its sign. */
static inline SHOAL_HD float shoal_narrow_to_f32(uint32_t v, int e, int m, int ieee_inf)
{
    const uint32_t bias = (1u << (e - 1)) - 1u;
    const uint32_t emax = (1u << e) - 1u;
    const uint32_t exp_mask = emax << 23;             /* exponent, moved to fp32's place */
    const uint32_t magic = (127u - bias + 1u) << 23;  /* 2^(1-bias), the smallest normal */
    uint32_t sign = ((v >> (e + m)) & 1u) << 31;
    uint32_t body = v & ((1u << (e + m)) - 1u);
    uint32_t o = body << (23 - m);
    uint32_t exp = o & exp_mask;
    uint32_t normal = o + ((127u - bias) << 23);
    /* A subnormal is read as the normal 2^(1-bias) * 1.man and the implicit
     * one subtracted again: exact, and it leaves a normal fp32. */
    uint32_t sub = shoal_f32_bits(shoal_bits_f32(normal + (1u << 23)) - shoal_bits_f32(magic));
    uint32_t r = exp == 0 ? sub : normal;
    if (ieee_inf) {
        uint32_t special = (normal + ((255u - emax - (127u - bias)) << 23)) |
                           ((o & 0x7fffffu) ? 0x400000u : 0u);
        r = exp == exp_mask ? special : r;
    } else {
        r = body == (1u << (e + m)) - 1u ? 0x7fc00000u : r;
    }
    return shoal_bits_f32(r | sign);
}

/* fp32 to a narrow float, rounding to nearest even. Overflow gives inf where
 * the format has one (fp16, e5m2 when sat == 0); with sat, or for e4m3, the
 * largest finite value of that sign, infinity included (as CUDA's
 * __NV_SATFINITE). NaN stays NaN with its sign: where the format has NaN
 * payloads (fp16, e5m2) it comes out quiet with the top of its payload, as
 * x86's vcvtps2ph does; e4m3fn has the one NaN pattern. */
static inline SHOAL_HD uint32_t shoal_f32_to_narrow(float f, int e, int m, int ieee_inf, int sat)
{
    const uint32_t bias = (1u << (e - 1)) - 1u;
    const uint32_t emax = (1u << e) - 1u;
    const uint32_t max_finite = ieee_inf ? ((emax - 1u) << m) | ((1u << m) - 1u)
                                         : (emax << m) | ((1u << m) - 2u);
    const uint32_t overflow = (ieee_inf && !sat) ? emax << m : max_finite;
    const uint32_t nan_bits = ieee_inf ? (emax << m) | (1u << (m - 1))
                                       : (emax << m) | ((1u << m) - 1u);
    const uint32_t min_normal = (127u - bias + 1u) << 23;   /* 2^(1-bias) */
    /* An fp32 whose ulp is the narrow subnormal step 2^(1-bias-m): adding
     * it lets the FPU do the round-to-nearest-even of a subnormal result. */
    const uint32_t magic = (151u - bias - (uint32_t)m) << 23;
    uint32_t u = shoal_f32_bits(f);
    uint32_t sign = (u >> 31) << (e + m);
    uint32_t a = u & 0x7fffffffu;
    uint32_t sub = shoal_f32_bits(shoal_bits_f32(a) + shoal_bits_f32(magic)) - magic;
    /* Normal: rebias, then add just under half an ulp plus the kept lsb, so
     * that ties go to even; a mantissa carry moves into the exponent. */
    uint32_t odd = (a >> (23 - m)) & 1u;
    uint32_t normal = (a + ((bias - 127u) << 23) + ((1u << (22 - m)) - 1u) + odd) >> (23 - m);
    /* Every value compared is below 2^31: signed compares, which SIMD units
     * have, give the same answers. */
    uint32_t r = (int32_t)a < (int32_t)min_normal ? sub : normal;
    r = (int32_t)r > (int32_t)max_finite ? overflow : r;
    uint32_t nan = nan_bits | (ieee_inf ? (a >> (23 - m)) & ((1u << m) - 1u) : 0u);
    r = (int32_t)a > 0x7f800000 ? nan : r;
    return sign | r;
}

static inline SHOAL_HD float shoal_f16_to_f32(uint16_t h) { return shoal_narrow_to_f32(h, 5, 10, 1); }
static inline SHOAL_HD uint16_t shoal_f32_to_f16(float f) { return (uint16_t)shoal_f32_to_narrow(f, 5, 10, 1, 0); }
static inline SHOAL_HD float shoal_e4m3_to_f32(uint8_t v) { return shoal_narrow_to_f32(v, 4, 3, 0); }
static inline SHOAL_HD uint8_t shoal_f32_to_e4m3(float f) { return (uint8_t)shoal_f32_to_narrow(f, 4, 3, 0, 1); }
static inline SHOAL_HD float shoal_e5m2_to_f32(uint8_t v) { return shoal_narrow_to_f32(v, 5, 2, 1); }
static inline SHOAL_HD uint8_t shoal_f32_to_e5m2(float f) { return (uint8_t)shoal_f32_to_narrow(f, 5, 2, 1, 1); }

#endif
