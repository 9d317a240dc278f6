/* Scalar reference of the vendor conformance test: dtype conversions written
 * from the formats' definitions, the inputs every rank feeds each reduction,
 * and the expected results. */
#include "vendor.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

uint32_t vt_mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

static uint32_t hash3(uint32_t a, uint32_t b, uint32_t c)
{
    return vt_mix(a * 0x9e3779b1U ^ vt_mix(b * 0x85ebca77U ^ vt_mix(c + 0x27d4eb2fU)));
}

static uint64_t hash3_64(uint32_t a, uint32_t b, uint32_t c)
{
    return (uint64_t)hash3(a, b, c) << 32 | hash3(c ^ 0x5bd1e995U, a, b);
}

size_t vt_size(ncclDataType_t dt)
{
    switch (dt) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    default:
        return 8;
    }
}

vt_kind_t vt_kind(ncclDataType_t dt)
{
    switch (dt) {
    case ncclInt8:
    case ncclInt32:
    case ncclInt64:
        return VT_SINT;
    case ncclUint8:
    case ncclUint32:
    case ncclUint64:
        return VT_UINT;
    default:
        return VT_FLOAT;
    }
}

const char *vt_dtype_name(ncclDataType_t dt)
{
    static const char *const names[ncclNumTypes] = {
        "int8",    "uint8",   "int32", "uint32",   "int64",   "uint64",
        "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2",
    };
    return (unsigned)dt < ncclNumTypes ? names[dt] : "?";
}

const char *vt_op_name(int op)
{
    static const char *const names[VT_NOPS] = {"sum", "prod", "max", "min", "avg", "premulsum"};
    return op >= 0 && op < VT_NOPS ? names[op] : "?";
}

/* ---- minifloats -----------------------------------------------------------
 * A value is (-1)^s * 2^(e - bias) * 1.m for a non-zero exponent field e and
 * (-1)^s * 2^(1 - bias) * 0.m for e == 0. Encoding scales the magnitude so
 * that the mantissa bits become the integer part, rounds that with rint
 * (the default mode rounds half to even) and lets a carry out of the
 * mantissa move into the exponent, which is what the bit layout does when
 * the two fields are simply added. */

typedef struct {
    int ebits, mbits, bias;
    bool ieee; /* all-ones exponent is Inf/NaN (e4m3 uses it for numbers) */
} vt_minifloat_t;

static const vt_minifloat_t fmt_half = {5, 10, 15, true};
static const vt_minifloat_t fmt_bf16 = {8, 7, 127, true};
static const vt_minifloat_t fmt_e4m3 = {4, 3, 7, false};
static const vt_minifloat_t fmt_e5m2 = {5, 2, 15, true};

static uint32_t mf_encode(const vt_minifloat_t *f, double v)
{
    uint32_t sign = signbit(v) ? 1U << (f->ebits + f->mbits) : 0;
    double a = fabs(v);
    if (a == 0)
        return sign;
    int e;
    frexp(a, &e); /* a = m * 2^e with m in [0.5, 1): unbiased exponent e - 1 */
    int field = e - 1 + f->bias;
    uint32_t bits;
    if (field <= 0) {
        /* Subnormal: the count of 2^(1 - bias - mbits) steps; rounding up to
         * 2^mbits steps yields exactly the smallest normal's encoding. */
        bits = (uint32_t)rint(ldexp(a, f->mbits + f->bias - 1));
    } else {
        uint32_t q = (uint32_t)rint(ldexp(a, f->mbits - (e - 1)));
        /* q is in [2^mbits, 2^(mbits+1)]; the implicit one sits in the
         * exponent field's lowest bit once shifted. */
        bits = ((uint32_t)(field - 1) << f->mbits) + q;
    }
    return sign | bits;
}

static double mf_decode(const vt_minifloat_t *f, uint32_t bits)
{
    uint32_t mmask = (1U << f->mbits) - 1;
    uint32_t emax = (1U << f->ebits) - 1;
    uint32_t m = bits & mmask;
    uint32_t e = (bits >> f->mbits) & emax;
    bool neg = (bits >> (f->ebits + f->mbits)) & 1;
    double a;
    if (f->ieee && e == emax)
        a = m ? NAN : INFINITY;
    else if (!f->ieee && e == emax && m == mmask)
        a = NAN;
    else if (e == 0)
        a = ldexp((double)m, 1 - f->bias - f->mbits);
    else
        a = ldexp((double)(m | (mmask + 1)), (int)e - f->bias - f->mbits);
    return neg ? -a : a;
}

uint16_t vt_to_half(double v) { return (uint16_t)mf_encode(&fmt_half, v); }
double vt_from_half(uint16_t h) { return mf_decode(&fmt_half, h); }
uint16_t vt_to_bf16(double v) { return (uint16_t)mf_encode(&fmt_bf16, v); }
double vt_from_bf16(uint16_t h) { return mf_decode(&fmt_bf16, h); }
uint8_t vt_to_e4m3(double v) { return (uint8_t)mf_encode(&fmt_e4m3, v); }
double vt_from_e4m3(uint8_t h) { return mf_decode(&fmt_e4m3, h); }
uint8_t vt_to_e5m2(double v) { return (uint8_t)mf_encode(&fmt_e5m2, v); }
double vt_from_e5m2(uint8_t h) { return mf_decode(&fmt_e5m2, h); }

/* Mantissa bits and smallest step of each float dtype, for one ulp. */
static void float_shape(ncclDataType_t dt, int *mbits_p, int *min_exp_p)
{
    switch (dt) {
    case ncclFloat16:
        *mbits_p = 10, *min_exp_p = -24;
        break;
    case ncclBfloat16:
        *mbits_p = 7, *min_exp_p = -133;
        break;
    case ncclFloat8e4m3:
        *mbits_p = 3, *min_exp_p = -9;
        break;
    case ncclFloat8e5m2:
        *mbits_p = 2, *min_exp_p = -16;
        break;
    case ncclFloat32:
        *mbits_p = 23, *min_exp_p = -149;
        break;
    default:
        *mbits_p = 52, *min_exp_p = -1074;
        break;
    }
}

static double ulp_of(ncclDataType_t dt, double v)
{
    int mbits, min_exp, e;
    float_shape(dt, &mbits, &min_exp);
    frexp(fabs(v), &e);
    int exp = e - 1 - mbits;
    return ldexp(1.0, exp > min_exp ? exp : min_exp);
}

/* ---- elements -------------------------------------------------------------- */

void vt_store(ncclDataType_t dt, void *buf, size_t i, vt_val_t v)
{
    switch (dt) {
    case ncclInt8: {
        int8_t x = (int8_t)v.i;
        memcpy((char *)buf + i, &x, 1);
        break;
    }
    case ncclUint8: {
        uint8_t x = (uint8_t)v.u;
        memcpy((char *)buf + i, &x, 1);
        break;
    }
    case ncclInt32: {
        int32_t x = (int32_t)v.i;
        memcpy((char *)buf + 4 * i, &x, 4);
        break;
    }
    case ncclUint32: {
        uint32_t x = (uint32_t)v.u;
        memcpy((char *)buf + 4 * i, &x, 4);
        break;
    }
    case ncclInt64:
        memcpy((char *)buf + 8 * i, &v.i, 8);
        break;
    case ncclUint64:
        memcpy((char *)buf + 8 * i, &v.u, 8);
        break;
    case ncclFloat16: {
        uint16_t x = vt_to_half(v.f);
        memcpy((char *)buf + 2 * i, &x, 2);
        break;
    }
    case ncclBfloat16: {
        uint16_t x = vt_to_bf16(v.f);
        memcpy((char *)buf + 2 * i, &x, 2);
        break;
    }
    case ncclFloat32: {
        float x = (float)v.f;
        memcpy((char *)buf + 4 * i, &x, 4);
        break;
    }
    case ncclFloat64:
        memcpy((char *)buf + 8 * i, &v.f, 8);
        break;
    case ncclFloat8e4m3:
        ((uint8_t *)buf)[i] = vt_to_e4m3(v.f);
        break;
    default:
        ((uint8_t *)buf)[i] = vt_to_e5m2(v.f);
        break;
    }
}

vt_val_t vt_load(ncclDataType_t dt, const void *buf, size_t i)
{
    vt_val_t v;
    const char *p = (const char *)buf + i * vt_size(dt);
    switch (dt) {
    case ncclInt8: {
        int8_t x;
        memcpy(&x, p, 1);
        v.i = x;
        break;
    }
    case ncclUint8: {
        uint8_t x;
        memcpy(&x, p, 1);
        v.u = x;
        break;
    }
    case ncclInt32: {
        int32_t x;
        memcpy(&x, p, 4);
        v.i = x;
        break;
    }
    case ncclUint32: {
        uint32_t x;
        memcpy(&x, p, 4);
        v.u = x;
        break;
    }
    case ncclInt64:
        memcpy(&v.i, p, 8);
        break;
    case ncclUint64:
        memcpy(&v.u, p, 8);
        break;
    case ncclFloat16:
    case ncclBfloat16: {
        uint16_t x;
        memcpy(&x, p, 2);
        v.f = dt == ncclFloat16 ? vt_from_half(x) : vt_from_bf16(x);
        break;
    }
    case ncclFloat32: {
        float x;
        memcpy(&x, p, 4);
        v.f = x;
        break;
    }
    case ncclFloat64:
        memcpy(&v.f, p, 8);
        break;
    case ncclFloat8e4m3:
        v.f = vt_from_e4m3((uint8_t)*p);
        break;
    default:
        v.f = vt_from_e5m2((uint8_t)*p);
        break;
    }
    return v;
}

void vt_format(ncclDataType_t dt, vt_val_t v, char *text, size_t len)
{
    switch (vt_kind(dt)) {
    case VT_SINT:
        snprintf(text, len, "%" PRId64, v.i);
        break;
    case VT_UINT:
        snprintf(text, len, "%" PRIu64, v.u);
        break;
    default:
        snprintf(text, len, "%.9g", v.f);
        break;
    }
}

/* Round v through dt: integers wrap to the width, floats round. */
static vt_val_t normalize(ncclDataType_t dt, vt_val_t v)
{
    unsigned char tmp[8];
    vt_store(dt, tmp, 0, v);
    return vt_load(dt, tmp, 0);
}

/* ---- inputs ----------------------------------------------------------------- */

static int64_t in_range(uint32_t h, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(h % (uint64_t)(hi - lo + 1));
}

/* Any finite, non-negative-zero value of dt from random bits, for max and
 * min: those never round, so every bit pattern is fair game. */
static vt_val_t any_value(ncclDataType_t dt, uint32_t a, uint32_t b, uint32_t c)
{
    for (uint32_t k = 0;; k++) {
        uint64_t bits = hash3_64(a, b, c + k * 0x632be5abU);
        unsigned char tmp[8];
        memcpy(tmp, &bits, 8);
        vt_val_t v = vt_load(dt, tmp, 0);
        if (vt_kind(dt) != VT_FLOAT)
            return v;
        if (isfinite(v.f) && !(v.f == 0 && signbit(v.f)))
            return v;
    }
}

/* Sum-like inputs (sum, avg on integers, pre-multiply-sum): bounded so that
 * any partial sum of up to 8 terms, after the scalar, is exact in dt. */
static vt_val_t sum_value(ncclDataType_t dt, bool premul, uint32_t h, uint32_t h2)
{
    vt_val_t v;
    switch (dt) {
    case ncclInt8:
        v.i = premul ? in_range(h, -7, 7) : in_range(h, -15, 15);
        break;
    case ncclUint8:
        v.u = (uint64_t)(premul ? in_range(h, 0, 10) : in_range(h, 0, 31));
        break;
    case ncclInt32:
        v.i = in_range(h, -100000, 100000);
        break;
    case ncclUint32:
        v.u = h & ((1U << 28) - 1);
        break;
    case ncclInt64:
        v.i = in_range(h, -1000, 1000) + ((int64_t)(h2 % 3) - 1) * ((int64_t)1 << 40);
        break;
    case ncclUint64:
        v.u = ((uint64_t)h << 28 ^ h2) & (((uint64_t)1 << 60) - 1);
        break;
    case ncclFloat16:
        v.f = (double)in_range(h, -30, 30) / 2;
        break;
    case ncclBfloat16:
        v.f = premul ? (double)in_range(h, -7, 7) : (double)in_range(h, -30, 30) / 2;
        break;
    case ncclFloat32:
        v.f = (double)in_range(h, -(1 << 16), 1 << 16) / 4;
        break;
    case ncclFloat64:
        v.f = (double)(in_range(h, -(1 << 20), 1 << 20) * (int64_t)(h2 % 1024 + 1)) / 4;
        break;
    case ncclFloat8e4m3:
        v.f = premul ? (double)in_range(h, -1, 1) : (double)in_range(h, -2, 2);
        break;
    default:
        v.f = (double)in_range(h, -1, 1);
        break;
    }
    return v;
}

vt_val_t vt_scalar(ncclDataType_t dt, int rank)
{
    static const int64_t sint[3] = {1, 2, -1};
    static const double wide[4] = {1, 2, -1, 0.5};
    static const double e4m3[3] = {1, 2, -1};
    vt_val_t v;
    switch (vt_kind(dt)) {
    case VT_SINT:
        v.i = sint[rank % 3];
        break;
    case VT_UINT:
        v.u = (uint64_t)(rank % 3 + 1);
        break;
    default:
        if (dt == ncclFloat8e4m3)
            v.f = e4m3[rank % 3];
        else if (dt == ncclFloat8e5m2)
            v.f = rank % 2 ? -1 : 1;
        else
            v.f = wide[rank % 4];
        break;
    }
    return v;
}

/* Float averages: the sum is a multiple of nranks, so sum / nranks = q is
 * exact. fp8 puts nranks * q on one rank and zeros elsewhere (anything else
 * leaves partial sums that fp8 cannot hold); wider floats spread small
 * integers and let one rank make up the difference. */
static vt_val_t avg_float_value(ncclDataType_t dt, int rank, int nranks, size_t g, uint32_t salt)
{
    int owner = (int)(g % (size_t)nranks);
    uint32_t gq = hash3((uint32_t)g, salt, 0xa11ce);
    vt_val_t v;
    if (dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2) {
        double q = dt == ncclFloat8e4m3 ? (double)in_range(gq, -2, 2) : (double)in_range(gq, -1, 2);
        v.f = rank == owner ? q * nranks : 0;
        return v;
    }
    if (rank != owner) {
        v.f = (double)in_range(hash3((uint32_t)g, salt, (uint32_t)rank), -7, 7);
        return v;
    }
    double rest = 0;
    for (int r = 0; r < nranks; r++)
        if (r != owner)
            rest += (double)in_range(hash3((uint32_t)g, salt, (uint32_t)r), -7, 7);
    v.f = (double)in_range(gq, -7, 7) * nranks - rest;
    return v;
}

vt_val_t vt_input(ncclDataType_t dt, int op, int rank, int nranks, size_t g, uint32_t salt)
{
    uint32_t h = hash3((uint32_t)g, salt ^ (uint32_t)op * 0x10001U, (uint32_t)rank);
    uint32_t h2 = hash3((uint32_t)(g >> 32) ^ 0x9e37U, h, (uint32_t)rank);
    vt_val_t v;
    switch (op) {
    case ncclProd: {
        /* Magnitudes 1, 2 (on a quarter of the ranks) and, for floats, 0.5:
         * no product of up to 8 ranks leaves [1/4, 4]; an occasional zero. */
        int phase = (int)((g + (size_t)rank) % 4);
        if (h % 31 == 0) {
            v.u = 0;
            if (vt_kind(dt) == VT_FLOAT)
                v.f = 0;
            return v;
        }
        bool neg = vt_kind(dt) != VT_UINT && h2 % 3 == 0;
        if (vt_kind(dt) == VT_FLOAT) {
            v.f = phase == 0 ? 2 : phase == 2 ? 0.5 : 1;
            v.f = neg ? -v.f : v.f;
        } else if (vt_kind(dt) == VT_SINT) {
            v.i = phase == 0 ? 2 : 1;
            v.i = neg ? -v.i : v.i;
        } else {
            v.u = phase == 0 ? 2 : 1;
        }
        return v;
    }
    case ncclMax:
    case ncclMin:
        return any_value(dt, (uint32_t)g, salt ^ (uint32_t)op, (uint32_t)rank);
    case ncclAvg:
        if (vt_kind(dt) == VT_FLOAT)
            return avg_float_value(dt, rank, nranks, g, salt);
        return sum_value(dt, false, h, h2);
    default:
        return sum_value(dt, op == VT_OP_PREMUL, h, h2);
    }
}

vt_val_t vt_expected(ncclDataType_t dt, int op, int nranks, size_t g, uint32_t salt)
{
    vt_kind_t kind = vt_kind(dt);
    vt_val_t acc = vt_input(dt, op, 0, nranks, g, salt);
    vt_val_t s0 = vt_scalar(dt, 0);
    if (op == VT_OP_PREMUL) {
        if (kind == VT_FLOAT)
            acc.f *= s0.f;
        else
            acc.u *= s0.u; /* two's complement: the same bits as signed */
    }
    for (int r = 1; r < nranks; r++) {
        vt_val_t x = vt_input(dt, op, r, nranks, g, salt);
        if (op == VT_OP_PREMUL) {
            vt_val_t s = vt_scalar(dt, r);
            if (kind == VT_FLOAT)
                x.f *= s.f;
            else
                x.u *= s.u;
        }
        switch (op) {
        case ncclProd:
            if (kind == VT_FLOAT)
                acc.f *= x.f;
            else
                acc.u *= x.u;
            break;
        case ncclMax:
            if (kind == VT_FLOAT)
                acc.f = x.f > acc.f ? x.f : acc.f;
            else if (kind == VT_SINT)
                acc.i = x.i > acc.i ? x.i : acc.i;
            else
                acc.u = x.u > acc.u ? x.u : acc.u;
            break;
        case ncclMin:
            if (kind == VT_FLOAT)
                acc.f = x.f < acc.f ? x.f : acc.f;
            else if (kind == VT_SINT)
                acc.i = x.i < acc.i ? x.i : acc.i;
            else
                acc.u = x.u < acc.u ? x.u : acc.u;
            break;
        default:
            if (kind == VT_FLOAT)
                acc.f += x.f;
            else
                acc.u += x.u;
            break;
        }
    }
    if (op == ncclAvg) {
        /* NCCL sums, then divides; integer division truncates toward zero. */
        if (kind == VT_FLOAT)
            acc.f /= nranks;
        else if (kind == VT_SINT)
            acc.i /= nranks;
        else
            acc.u /= (uint64_t)nranks;
    }
    return normalize(dt, acc);
}

bool vt_match(ncclDataType_t dt, int op, vt_val_t got, vt_val_t want)
{
    switch (vt_kind(dt)) {
    case VT_SINT:
        return got.i == want.i;
    case VT_UINT:
        return got.u == want.u;
    default:
        if (got.f == want.f)
            return true;
        return op == ncclAvg && fabs(got.f - want.f) <= ulp_of(dt, want.f);
    }
}

void vt_fill_input(void *buf, ncclDataType_t dt, int op, int rank, int nranks, size_t base,
                   size_t count, uint32_t salt)
{
    for (size_t k = 0; k < count; k++)
        vt_store(dt, buf, k, vt_input(dt, op, rank, nranks, base + k, salt));
}

/* Four bytes per hash: copies move megabytes, and the reference should not
 * be what the test spends its time on. */
static uint32_t byte_word(int src, size_t word, uint32_t salt)
{
    return hash3((uint32_t)word ^ (uint32_t)(word >> 32) * 0x2545f491U, salt,
                 (uint32_t)src + 0x3c6ef372U);
}

uint8_t vt_byte(int src, size_t off, uint32_t salt)
{
    return (uint8_t)(byte_word(src, off / 4, salt) >> (8 * (off % 4)));
}

void vt_fill_bytes(void *buf, size_t off, size_t len, int src, uint32_t salt)
{
    uint8_t *p = buf;
    size_t k = 0;
    for (; k < len && (off + k) % 4; k++)
        p[k] = vt_byte(src, off + k, salt);
    for (; k + 4 <= len; k += 4) {
        uint32_t w = byte_word(src, (off + k) / 4, salt);
        p[k] = (uint8_t)w, p[k + 1] = (uint8_t)(w >> 8);
        p[k + 2] = (uint8_t)(w >> 16), p[k + 3] = (uint8_t)(w >> 24);
    }
    for (; k < len; k++)
        p[k] = vt_byte(src, off + k, salt);
}
