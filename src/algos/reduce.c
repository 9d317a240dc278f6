/* Element-wise reduction kernels and their scalar references.
 *
 * The kernels are plain loops that the compiler vectorizes: dst may equal a
 * or b, but only exactly, so no element depends on another and each loop
 * carries a pragma that says so (no runtime overlap checks, which would send
 * the in-place case down the scalar path). On x86-64 every kernel is also
 * built for AVX2 and picked at load time (target_clones), and half uses the
 * F16C conversion instructions where the CPU has them.
 *
 * Semantics, shared by kernels and references:
 * - Integer SUM and PROD wrap around (computed in the unsigned type).
 * - The bitwise and logical ops exist for the integers only; the logical
 *   ones give 1 or 0.
 * - Float MAX and MIN follow fmax/fmin: a NaN operand is ignored, so the
 *   number wins; two NaNs give their bitwise OR (still a NaN). MAX(-0, +0)
 *   is +0 and MIN(-0, +0) is -0. The result thus does not depend on the order
 *   of the operands, nor on the order in which ranks are combined.
 * - half, bf16 and fp8 are decoded to fp32, combined in fp32 and rounded back
 *   to nearest even; fp8 saturates to its largest finite value (e5m2 too:
 *   an infinite result becomes 57344).
 */

/* For the whole file, so that every inline helper gets the same options and
 * still inlines into the kernels. gcc's -O2 vectorizes only loops that need
 * no scalar epilogue; these kernels are worth its full cost model. With
 * trapping math, gcc will not compute both sides of a select when one side
 * is a float operation, which keeps the conversions of dtype.h scalar; the
 * kernels never look at the floating-point exception flags, and clang does
 * not trap by default. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

#include "reduce.h"

#include "base/dtype.h"
#include "reduce_elem.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

/* "Iterations are independent": true because dst aliases a or b only
 * element for element. */
#if defined(__clang__)
/* The pragma only asks: a build that cannot vectorize a loop (sanitizers,
 * a target without the instructions) must still compile without warning. */
#pragma clang diagnostic ignored "-Wpass-failed"
#define SHOAL_VEC_LOOP _Pragma("clang loop vectorize(assume_safety) interleave(enable)")
#elif defined(__GNUC__)
#define SHOAL_VEC_LOOP _Pragma("GCC ivdep")
#else
#define SHOAL_VEC_LOOP
#endif

/* Each kernel is built twice, for AVX2 and for the baseline, and the loader
 * picks one for the CPU (an ifunc). ThreadSanitizer builds go without: the
 * ifunc resolvers it instruments run before its runtime is up. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHOAL_NO_IFUNC 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SHOAL_NO_IFUNC 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(SHOAL_NO_IFUNC)
#define SHOAL_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define SHOAL_KERNEL
#endif

/* Floats narrower than fp32 are handled in blocks of this many elements,
 * converted to fp32 arrays on the stack (1 KiB each). */
#define SHOAL_REDUCE_BLOCK 256

static inline size_t shoal_reduce_block_len(size_t count, size_t base)
{
    return count - base < SHOAL_REDUCE_BLOCK ? count - base : SHOAL_REDUCE_BLOCK;
}

/* ---- kernels ---- */

#define SHOAL_KERNEL_DEFINE(name, T, elem)                                             \
    SHOAL_KERNEL static void name(void *dst, const void *a, const void *b,             \
                                  size_t count)                                        \
    {                                                                                  \
        T *d = dst;                                                                    \
        const T *x = a, *y = b;                                                        \
        SHOAL_VEC_LOOP                                                                 \
        for (size_t i = 0; i < count; i++)                                             \
            d[i] = elem(x[i], y[i]);                                                   \
    }

#define SHOAL_KERNELS_DEFINE(sfx, T)                                                   \
    SHOAL_KERNEL_DEFINE(shoal_reduce_sum_##sfx, T, shoal_sum_##sfx)                    \
    SHOAL_KERNEL_DEFINE(shoal_reduce_prod_##sfx, T, shoal_prod_##sfx)                  \
    SHOAL_KERNEL_DEFINE(shoal_reduce_max_##sfx, T, shoal_max_##sfx)                    \
    SHOAL_KERNEL_DEFINE(shoal_reduce_min_##sfx, T, shoal_min_##sfx)

/* The integers also have the bitwise and logical ops. */
#define SHOAL_INT_KERNELS_DEFINE(sfx, T)                                               \
    SHOAL_KERNELS_DEFINE(sfx, T)                                                       \
    SHOAL_KERNEL_DEFINE(shoal_reduce_band_##sfx, T, shoal_band_##sfx)                  \
    SHOAL_KERNEL_DEFINE(shoal_reduce_bor_##sfx, T, shoal_bor_##sfx)                    \
    SHOAL_KERNEL_DEFINE(shoal_reduce_bxor_##sfx, T, shoal_bxor_##sfx)                  \
    SHOAL_KERNEL_DEFINE(shoal_reduce_land_##sfx, T, shoal_land_##sfx)                  \
    SHOAL_KERNEL_DEFINE(shoal_reduce_lor_##sfx, T, shoal_lor_##sfx)                    \
    SHOAL_KERNEL_DEFINE(shoal_reduce_lxor_##sfx, T, shoal_lxor_##sfx)

SHOAL_INT_KERNELS_DEFINE(i8, int8_t)
SHOAL_INT_KERNELS_DEFINE(u8, uint8_t)
SHOAL_INT_KERNELS_DEFINE(i32, int32_t)
SHOAL_INT_KERNELS_DEFINE(u32, uint32_t)
SHOAL_INT_KERNELS_DEFINE(i64, int64_t)
SHOAL_INT_KERNELS_DEFINE(u64, uint64_t)
SHOAL_KERNELS_DEFINE(f32, float)
SHOAL_KERNELS_DEFINE(f64, double)

/* Block conversions between a narrow float and fp32, the only part of the
 * narrow kernels that differs by type. The portable ones are inline, so each
 * kernel clone vectorizes them for its own target. */
#define SHOAL_CONVERT_DEFINE(sfx, T, dec, enc)                                         \
    static inline void shoal_decode_##sfx(float *f, const T *v, size_t n)              \
    {                                                                                  \
        for (size_t i = 0; i < n; i++)                                                 \
            f[i] = dec(v[i]);                                                          \
    }                                                                                  \
    static inline void shoal_encode_##sfx(T *v, const float *f, size_t n)              \
    {                                                                                  \
        for (size_t i = 0; i < n; i++)                                                 \
            v[i] = enc(f[i]);                                                          \
    }

SHOAL_CONVERT_DEFINE(f16, uint16_t, shoal_f16_to_f32, shoal_f32_to_f16)
SHOAL_CONVERT_DEFINE(bf16, uint16_t, shoal_bf16_to_f32, shoal_f32_to_bf16)
SHOAL_CONVERT_DEFINE(e4m3, uint8_t, shoal_e4m3_to_f32, shoal_f32_to_e4m3)
SHOAL_CONVERT_DEFINE(e5m2, uint8_t, shoal_e5m2_to_f32, shoal_f32_to_e5m2)

/* x86's F16C converts eight halves per instruction, exactly as the portable
 * code does (NaNs included: both keep the top of the payload). Every CPU
 * with AVX2 has it in practice, but it is checked on its own. */
#if defined(__x86_64__) && defined(__GNUC__)
#define SHOAL_HAVE_F16C 1
#define SHOAL_F16C_TARGET __attribute__((target("avx2,f16c")))

SHOAL_F16C_TARGET static inline void shoal_decode_f16c(float *f, const uint16_t *v, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i))));
    for (; i < n; i++)
        f[i] = shoal_f16_to_f32(v[i]);
}

SHOAL_F16C_TARGET static inline void shoal_encode_f16c(uint16_t *v, const float *f, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(v + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        v[i] = shoal_f32_to_f16(f[i]);
}
#endif

/* A narrow float reduced through fp32, a block at a time: decode both
 * inputs into arrays on the stack, combine there, encode into dst. Each of
 * these loops is simple enough to vectorize on its own. */
#define SHOAL_NARROW_KERNEL_DEFINE(attr, name, T, conv, elem)                          \
    attr static void name(void *dst, const void *a, const void *b, size_t count)       \
    {                                                                                  \
        T *d = dst;                                                                    \
        const T *x = a, *y = b;                                                        \
        float fx[SHOAL_REDUCE_BLOCK], fy[SHOAL_REDUCE_BLOCK];                          \
        for (size_t base = 0; base < count; base += SHOAL_REDUCE_BLOCK) {              \
            size_t n = shoal_reduce_block_len(count, base);                            \
            shoal_decode_##conv(fx, x + base, n);                                      \
            shoal_decode_##conv(fy, y + base, n);                                      \
            for (size_t i = 0; i < n; i++)                                             \
                fx[i] = elem(fx[i], fy[i]);                                            \
            shoal_encode_##conv(d + base, fx, n);                                      \
        }                                                                              \
    }

#define SHOAL_NARROW_KERNELS_DEFINE(attr, sfx, T, conv)                                \
    SHOAL_NARROW_KERNEL_DEFINE(attr, shoal_reduce_sum_##sfx, T, conv, shoal_sum_f32)   \
    SHOAL_NARROW_KERNEL_DEFINE(attr, shoal_reduce_prod_##sfx, T, conv, shoal_prod_f32) \
    SHOAL_NARROW_KERNEL_DEFINE(attr, shoal_reduce_max_##sfx, T, conv, shoal_max_f32)   \
    SHOAL_NARROW_KERNEL_DEFINE(attr, shoal_reduce_min_##sfx, T, conv, shoal_min_f32)

SHOAL_NARROW_KERNELS_DEFINE(SHOAL_KERNEL, f16, uint16_t, f16)
SHOAL_NARROW_KERNELS_DEFINE(SHOAL_KERNEL, bf16, uint16_t, bf16)
SHOAL_NARROW_KERNELS_DEFINE(SHOAL_KERNEL, e4m3, uint8_t, e4m3)
SHOAL_NARROW_KERNELS_DEFINE(SHOAL_KERNEL, e5m2, uint8_t, e5m2)
#ifdef SHOAL_HAVE_F16C
SHOAL_NARROW_KERNELS_DEFINE(SHOAL_F16C_TARGET, f16c, uint16_t, f16c)
#endif

#define SHOAL_KERNEL_ROW(sfx)                                                          \
    {                                                                                  \
        [SHOAL_SUM] = shoal_reduce_sum_##sfx, [SHOAL_PROD] = shoal_reduce_prod_##sfx,  \
        [SHOAL_MAX] = shoal_reduce_max_##sfx, [SHOAL_MIN] = shoal_reduce_min_##sfx,    \
    }

static const shoal_reduce_fn_t shoal_reduce_kernels[SHOAL_DTYPE_COUNT][SHOAL_MIN + 1] = {
    [SHOAL_INT8] = SHOAL_KERNEL_ROW(i8),       [SHOAL_UINT8] = SHOAL_KERNEL_ROW(u8),
    [SHOAL_INT32] = SHOAL_KERNEL_ROW(i32),     [SHOAL_UINT32] = SHOAL_KERNEL_ROW(u32),
    [SHOAL_INT64] = SHOAL_KERNEL_ROW(i64),     [SHOAL_UINT64] = SHOAL_KERNEL_ROW(u64),
    [SHOAL_FLOAT16] = SHOAL_KERNEL_ROW(f16),   [SHOAL_FLOAT32] = SHOAL_KERNEL_ROW(f32),
    [SHOAL_FLOAT64] = SHOAL_KERNEL_ROW(f64),   [SHOAL_BFLOAT16] = SHOAL_KERNEL_ROW(bf16),
    [SHOAL_FP8_E4M3] = SHOAL_KERNEL_ROW(e4m3), [SHOAL_FP8_E5M2] = SHOAL_KERNEL_ROW(e5m2),
};

#define SHOAL_BITOP_ROW(sfx)                                                           \
    {                                                                                  \
        shoal_reduce_band_##sfx, shoal_reduce_bor_##sfx,  shoal_reduce_bxor_##sfx,     \
        shoal_reduce_land_##sfx, shoal_reduce_lor_##sfx, shoal_reduce_lxor_##sfx,      \
    }

/* Indexed by op - SHOAL_BAND; the float rows stay NULL. */
static const shoal_reduce_fn_t shoal_reduce_bitop_kernels[SHOAL_DTYPE_COUNT]
                                                         [SHOAL_BITOP_END - SHOAL_BAND] = {
    [SHOAL_INT8] = SHOAL_BITOP_ROW(i8),   [SHOAL_UINT8] = SHOAL_BITOP_ROW(u8),
    [SHOAL_INT32] = SHOAL_BITOP_ROW(i32), [SHOAL_UINT32] = SHOAL_BITOP_ROW(u32),
    [SHOAL_INT64] = SHOAL_BITOP_ROW(i64), [SHOAL_UINT64] = SHOAL_BITOP_ROW(u64),
};

/* 1 when the F16C kernels may run, 0 when not, -1 before the first look.
 * Atomic because any thread may look first; they all store the same. */
static atomic_int shoal_reduce_f16c = -1;

void shoal_reduce_simd_enable(int enable)
{
    atomic_store_explicit(&shoal_reduce_f16c, enable ? -1 : 0, memory_order_relaxed);
}

#ifdef SHOAL_HAVE_F16C
static const shoal_reduce_fn_t shoal_reduce_kernels_f16c[SHOAL_MIN + 1] = SHOAL_KERNEL_ROW(f16c);

static int shoal_reduce_use_f16c(void)
{
    int use = atomic_load_explicit(&shoal_reduce_f16c, memory_order_relaxed);
    if (use < 0) {
        unsigned eax, ebx, ecx, edx;
        /* avx2 also says that the OS saves the 256-bit registers. */
        use = __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
              (ecx & bit_F16C);
        atomic_store_explicit(&shoal_reduce_f16c, use, memory_order_relaxed);
    }
    return use;
}
#endif

shoal_reduce_fn_t shoal_reduce_fn(shoal_dtype_t dtype, shoal_op_t op)
{
    if ((unsigned)dtype >= SHOAL_DTYPE_COUNT)
        return NULL;
    if (shoal_op_is_bitop(op))
        return shoal_reduce_bitop_kernels[dtype][op - SHOAL_BAND];
    if ((unsigned)op >= SHOAL_OP_COUNT)
        return NULL;
    if (op == SHOAL_AVG)
        op = SHOAL_SUM;
#ifdef SHOAL_HAVE_F16C
    if (dtype == SHOAL_FLOAT16 && shoal_reduce_use_f16c())
        return shoal_reduce_kernels_f16c[op];
#endif
    return shoal_reduce_kernels[dtype][op];
}

/* ---- AVG finish ---- */

/* Integer division has no vector instruction; these loops stay scalar, which
 * is acceptable for a pass made once per collective. D is a type that holds
 * both T and n, so that n is never truncated. */
#define SHOAL_AVG_INT_DEFINE(name, T, D)                                               \
    static void name(void *dst, const void *src, size_t count, int n)                  \
    {                                                                                  \
        T *d = dst;                                                                    \
        const T *s = src;                                                              \
        const D div = (D)n;                                                            \
        for (size_t i = 0; i < count; i++)                                             \
            d[i] = (T)((D)s[i] / div);                                                 \
    }

SHOAL_AVG_INT_DEFINE(shoal_avg_i8, int8_t, int)
SHOAL_AVG_INT_DEFINE(shoal_avg_u8, uint8_t, int)
SHOAL_AVG_INT_DEFINE(shoal_avg_i32, int32_t, int32_t)
SHOAL_AVG_INT_DEFINE(shoal_avg_u32, uint32_t, uint32_t)
SHOAL_AVG_INT_DEFINE(shoal_avg_i64, int64_t, int64_t)
SHOAL_AVG_INT_DEFINE(shoal_avg_u64, uint64_t, uint64_t)

SHOAL_KERNEL static void shoal_avg_f32(void *dst, const void *src, size_t count, int n)
{
    float *d = dst;
    const float *s = src;
    const float inv = 1.0f / (float)n;
    SHOAL_VEC_LOOP
    for (size_t i = 0; i < count; i++)
        d[i] = s[i] * inv;
}

SHOAL_KERNEL static void shoal_avg_f64(void *dst, const void *src, size_t count, int n)
{
    double *d = dst;
    const double *s = src;
    const double inv = 1.0 / (double)n;
    SHOAL_VEC_LOOP
    for (size_t i = 0; i < count; i++)
        d[i] = s[i] * inv;
}

#define SHOAL_AVG_NARROW_DEFINE(attr, name, T, conv)                                   \
    attr static void name(void *dst, const void *src, size_t count, int n)             \
    {                                                                                  \
        T *d = dst;                                                                    \
        const T *s = src;                                                              \
        const float inv = 1.0f / (float)n;                                             \
        float f[SHOAL_REDUCE_BLOCK];                                                   \
        for (size_t base = 0; base < count; base += SHOAL_REDUCE_BLOCK) {              \
            size_t len = shoal_reduce_block_len(count, base);                          \
            shoal_decode_##conv(f, s + base, len);                                     \
            for (size_t i = 0; i < len; i++)                                           \
                f[i] *= inv;                                                           \
            shoal_encode_##conv(d + base, f, len);                                     \
        }                                                                              \
    }

SHOAL_AVG_NARROW_DEFINE(SHOAL_KERNEL, shoal_avg_f16, uint16_t, f16)
SHOAL_AVG_NARROW_DEFINE(SHOAL_KERNEL, shoal_avg_bf16, uint16_t, bf16)
SHOAL_AVG_NARROW_DEFINE(SHOAL_KERNEL, shoal_avg_e4m3, uint8_t, e4m3)
SHOAL_AVG_NARROW_DEFINE(SHOAL_KERNEL, shoal_avg_e5m2, uint8_t, e5m2)
#ifdef SHOAL_HAVE_F16C
SHOAL_AVG_NARROW_DEFINE(SHOAL_F16C_TARGET, shoal_avg_f16c, uint16_t, f16c)
#endif

typedef void (*shoal_avg_fn_t)(void *dst, const void *src, size_t count, int n);

static const shoal_avg_fn_t shoal_avg_kernels[SHOAL_DTYPE_COUNT] = {
    [SHOAL_INT8] = shoal_avg_i8,       [SHOAL_UINT8] = shoal_avg_u8,
    [SHOAL_INT32] = shoal_avg_i32,     [SHOAL_UINT32] = shoal_avg_u32,
    [SHOAL_INT64] = shoal_avg_i64,     [SHOAL_UINT64] = shoal_avg_u64,
    [SHOAL_FLOAT16] = shoal_avg_f16,   [SHOAL_FLOAT32] = shoal_avg_f32,
    [SHOAL_FLOAT64] = shoal_avg_f64,   [SHOAL_BFLOAT16] = shoal_avg_bf16,
    [SHOAL_FP8_E4M3] = shoal_avg_e4m3, [SHOAL_FP8_E5M2] = shoal_avg_e5m2,
};

/* n < 1 has no average: dst is left as it is. */
void shoal_avg_finish(void *dst, const void *src, size_t count, shoal_dtype_t dtype, int n)
{
    if ((unsigned)dtype >= SHOAL_DTYPE_COUNT || n < 1)
        return;
#ifdef SHOAL_HAVE_F16C
    if (dtype == SHOAL_FLOAT16 && shoal_reduce_use_f16c()) {
        shoal_avg_f16c(dst, src, count, n);
        return;
    }
#endif
    shoal_avg_kernels[dtype](dst, src, count, n);
}

/* ---- scalar references ----
 *
 * Written from the definitions rather than from the kernels above: integers
 * widen to 64 bits and truncate back, MAX/MIN spell out the NaN and signed
 * zero rules with isnan and signbit. */

static int shoal_ref_is_signed(shoal_dtype_t dtype)
{
    return dtype == SHOAL_INT8 || dtype == SHOAL_INT32 || dtype == SHOAL_INT64;
}

static uint64_t shoal_ref_load_int(const void *p, size_t i, shoal_dtype_t dtype)
{
    switch (dtype) {
    case SHOAL_INT8: return (uint64_t)(int64_t)((const int8_t *)p)[i];
    case SHOAL_UINT8: return ((const uint8_t *)p)[i];
    case SHOAL_INT32: return (uint64_t)(int64_t)((const int32_t *)p)[i];
    case SHOAL_UINT32: return ((const uint32_t *)p)[i];
    case SHOAL_INT64: return (uint64_t)((const int64_t *)p)[i];
    default: return ((const uint64_t *)p)[i];
    }
}

/* Keeps the low bits: the wrap-around result for SUM and PROD. */
static void shoal_ref_store_int(void *p, size_t i, shoal_dtype_t dtype, uint64_t v)
{
    switch (dtype) {
    case SHOAL_INT8:
    case SHOAL_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case SHOAL_INT32:
    case SHOAL_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((uint64_t *)p)[i] = v; break;
    }
}

static uint64_t shoal_ref_int_op(uint64_t x, uint64_t y, int is_signed, shoal_op_t op)
{
    int x_greater = is_signed ? (int64_t)x > (int64_t)y : x > y;
    switch (op) {
    case SHOAL_PROD: return x * y;
    case SHOAL_MAX: return x_greater ? x : y;
    case SHOAL_MIN: return x_greater ? y : x;
    case SHOAL_BAND: return x & y;
    case SHOAL_BOR: return x | y;
    case SHOAL_BXOR: return x ^ y;
    case SHOAL_LAND: return x != 0 && y != 0;
    case SHOAL_LOR: return x != 0 || y != 0;
    case SHOAL_LXOR: return (x != 0) != (y != 0);
    default: return x + y;
    }
}

static float shoal_ref_f32_op(float x, float y, shoal_op_t op)
{
    if (op == SHOAL_SUM || op == SHOAL_AVG)
        return x + y;
    if (op == SHOAL_PROD)
        return x * y;
    if (isnan(x) && isnan(y)) {
        uint32_t ux, uy;
        memcpy(&ux, &x, sizeof(ux));
        memcpy(&uy, &y, sizeof(uy));
        ux |= uy;
        memcpy(&x, &ux, sizeof(x));
        return x;
    }
    if (isnan(x))
        return y;
    if (isnan(y))
        return x;
    if (x == 0 && y == 0) {
        int negative = op == SHOAL_MAX ? signbit(x) && signbit(y) : signbit(x) || signbit(y);
        return negative ? -0.0f : 0.0f;
    }
    if (op == SHOAL_MAX)
        return x > y ? x : y;
    return x < y ? x : y;
}

static double shoal_ref_f64_op(double x, double y, shoal_op_t op)
{
    if (op == SHOAL_SUM || op == SHOAL_AVG)
        return x + y;
    if (op == SHOAL_PROD)
        return x * y;
    if (isnan(x) && isnan(y)) {
        uint64_t ux, uy;
        memcpy(&ux, &x, sizeof(ux));
        memcpy(&uy, &y, sizeof(uy));
        ux |= uy;
        memcpy(&x, &ux, sizeof(x));
        return x;
    }
    if (isnan(x))
        return y;
    if (isnan(y))
        return x;
    if (x == 0 && y == 0) {
        int negative = op == SHOAL_MAX ? signbit(x) && signbit(y) : signbit(x) || signbit(y);
        return negative ? -0.0 : 0.0;
    }
    if (op == SHOAL_MAX)
        return x > y ? x : y;
    return x < y ? x : y;
}

/* Narrow floats as fp32, for the references. */
static float shoal_ref_load_narrow(const void *p, size_t i, shoal_dtype_t dtype)
{
    switch (dtype) {
    case SHOAL_FLOAT16: return shoal_f16_to_f32(((const uint16_t *)p)[i]);
    case SHOAL_BFLOAT16: return shoal_bf16_to_f32(((const uint16_t *)p)[i]);
    case SHOAL_FP8_E4M3: return shoal_e4m3_to_f32(((const uint8_t *)p)[i]);
    default: return shoal_e5m2_to_f32(((const uint8_t *)p)[i]);
    }
}

static void shoal_ref_store_narrow(void *p, size_t i, shoal_dtype_t dtype, float v)
{
    switch (dtype) {
    case SHOAL_FLOAT16: ((uint16_t *)p)[i] = shoal_f32_to_f16(v); break;
    case SHOAL_BFLOAT16: ((uint16_t *)p)[i] = shoal_f32_to_bf16(v); break;
    case SHOAL_FP8_E4M3: ((uint8_t *)p)[i] = shoal_f32_to_e4m3(v); break;
    default: ((uint8_t *)p)[i] = shoal_f32_to_e5m2(v); break;
    }
}

void shoal_reduce_ref(void *dst, const void *a, const void *b, size_t count,
                      shoal_dtype_t dtype, shoal_op_t op)
{
    if ((unsigned)dtype >= SHOAL_DTYPE_COUNT ||
        (shoal_op_is_bitop(op) ? !shoal_dtype_is_int(dtype) : (unsigned)op >= SHOAL_OP_COUNT))
        return;
    for (size_t i = 0; i < count; i++) {
        switch (dtype) {
        case SHOAL_FLOAT32:
            ((float *)dst)[i] = shoal_ref_f32_op(((const float *)a)[i], ((const float *)b)[i], op);
            break;
        case SHOAL_FLOAT64:
            ((double *)dst)[i] =
                shoal_ref_f64_op(((const double *)a)[i], ((const double *)b)[i], op);
            break;
        case SHOAL_FLOAT16:
        case SHOAL_BFLOAT16:
        case SHOAL_FP8_E4M3:
        case SHOAL_FP8_E5M2: {
            float x = shoal_ref_load_narrow(a, i, dtype);
            float y = shoal_ref_load_narrow(b, i, dtype);
            shoal_ref_store_narrow(dst, i, dtype, shoal_ref_f32_op(x, y, op));
            break;
        }
        default: {
            uint64_t x = shoal_ref_load_int(a, i, dtype);
            uint64_t y = shoal_ref_load_int(b, i, dtype);
            shoal_ref_store_int(dst, i, dtype,
                                shoal_ref_int_op(x, y, shoal_ref_is_signed(dtype), op));
            break;
        }
        }
    }
}

void shoal_avg_finish_ref(void *dst, const void *src, size_t count, shoal_dtype_t dtype, int n)
{
    if ((unsigned)dtype >= SHOAL_DTYPE_COUNT || n < 1)
        return;
    for (size_t i = 0; i < count; i++) {
        switch (dtype) {
        case SHOAL_FLOAT32:
            ((float *)dst)[i] = ((const float *)src)[i] * (1.0f / (float)n);
            break;
        case SHOAL_FLOAT64:
            ((double *)dst)[i] = ((const double *)src)[i] * (1.0 / (double)n);
            break;
        case SHOAL_FLOAT16:
        case SHOAL_BFLOAT16:
        case SHOAL_FP8_E4M3:
        case SHOAL_FP8_E5M2:
            shoal_ref_store_narrow(dst, i, dtype,
                                   shoal_ref_load_narrow(src, i, dtype) * (1.0f / (float)n));
            break;
        default: {
            /* Division truncates toward zero in C, signed or not. */
            uint64_t x = shoal_ref_load_int(src, i, dtype);
            uint64_t q = shoal_ref_is_signed(dtype) ? (uint64_t)((int64_t)x / (int64_t)n)
                                                    : x / (uint64_t)n;
            shoal_ref_store_int(dst, i, dtype, q);
            break;
        }
        }
    }
}
