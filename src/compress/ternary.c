/* The ternary codec (TernGrad): every value travels as one signed integer,
 * its stochastic rounding to {-1, 0, +1} times a scale that all ranks share.
 *
 * Scales. c->scales[b] is the scale of block b of the whole tensor, where
 * b = (first + i) / c->block, and every rank holds the same array: the
 * collective computes it before the reduction as a max all-reduce of each
 * rank's shoal_codec_block_absmax. Scales must be finite; a scale that is
 * not > 0 (0 in particular) encodes every value of its block as 0.
 *
 * Clipping (optional). shoal_codec_clip_bound gives k standard deviations
 * of a rank's input; a rank clips its block maxima to it before the max
 * all-reduce, so that each scale is min(block max, bound) (a bound of 0
 * means no clipping). Values beyond a block's scale encode as if they were
 * +-scale; what clipping loses lands in the residual.
 *
 * Wire form. One integer per value, no header and no scales (they are
 * shared): int8 when c->wide == 0, int16 when c->wide != 0, stored in the
 * machine's byte order at any alignment. wire_bytes = count * (1 or 2).
 * With c->packed, 4 bits, two to a byte (see "the packed wire" below):
 * wire_bytes = (count + 1) / 2, for sums within +-7.
 *
 * encode. With p = |x_i| / scale (the clipped value's fraction of the
 * scale, in [0, 1]) and u = shoal_codec_uniform(shoal_codec_key(c->seed,
 * c->step), first + i), code_i = sign(x_i) * (u < p). Its expectation is
 * x_i / scale (clipped): decoding is unbiased, and ranks that use different
 * seeds round independently. With c->round == SHOAL_ROUND_NEAREST instead,
 * code_i = sign(x_i) * (p >= 0.5): deterministic, half away from zero,
 * and biased (every value below half a scale is lost, to the residual).
 * NaN encodes as 0.
 *
 * add_encode. wire_out_i = wire_in_i + encode(local)_i, an exact integer
 * add, so a reduction's result does not depend on the order of the hops.
 * A sum beyond +-127 (int8) or +-32767 (int16) saturates there: the caller
 * must set `wide` for more than 127 ranks, and keep to 32767 ranks with it.
 *
 * decode. dst_i = code_i * scale: the integer sum times the shared scale.
 *
 * Addend (when not NULL, codec.h): x_i above is src_i + addend_i (local_i
 * + addend_i for add_encode), rounded to fp32 once, in the same loop.
 *
 * Residual (when not NULL). encode: x_i - code_i * scale. add_encode: the
 * part of local_i that this call did not add, local_i - (wire_out_i -
 * wire_in_i) * scale, which is local_i - encode(local)_i * scale unless
 * the sum saturated. Summed over the ranks of a reduction, the residuals
 * are the exact sum minus the decoded result, up to the rounding of each
 * subtraction. (codec.h's (decode(wire_in) + local) - decode(wire_out) is
 * the same quantity in exact arithmetic; this form rounds once, not three
 * times.) code_i * scale is exact, as code_i is -1, 0 or 1.
 *
 * Kernels. Each operation has a scalar reference, written value by value
 * as above (with compress/ternary_elem.h, whose functions the CUDA
 * module's codec kernel runs too), that runs when
 * shoal_codec_simd_enabled() is 0, and kernels made of plain loops that
 * the compiler vectorises (built for AVX-512, AVX2 and the baseline). The
 * kernels walk a run in segments in which the scale and the top 32 bits
 * of the value's index are constant, so that the random numbers come from
 * 32-bit vector arithmetic. Both do the same IEEE operations on each
 * value (one division, one compare, one multiply and one subtraction,
 * never fused), so they agree bit for bit.
 *
 * Calls. c->block is 32, 64 or 128 (codec.h). Outputs may alias inputs
 * only element for element: wire_out == wire_in, residual == src or
 * local. Nothing is kept between calls: every function is thread-safe. */

/* As in algos/reduce.c: gcc's -O2 vectorizes only loops that need no
 * scalar epilogue, and trapping math keeps the float selects scalar. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif
/* Never fuse a multiply and an add: the reference and the kernels must
 * round the same way. (gcc does not fuse in ISO C mode, -std=c11.) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include "compress/codec.h"
#include "compress/ternary_elem.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* "Iterations are independent": outputs alias inputs only element for
 * element (wire_out == wire_in, residual == src), as in algos/reduce.c. */
#if defined(__clang__)
/* The loop pragma only asks: a build that cannot vectorize a loop
 * (sanitizers) must still compile without warning. */
#pragma clang diagnostic ignored "-Wpass-failed"
#define SHOAL_TERNARY_VEC_LOOP _Pragma("clang loop vectorize(assume_safety) interleave(enable)")
#elif defined(__GNUC__)
#define SHOAL_TERNARY_VEC_LOOP _Pragma("GCC ivdep")
#else
#define SHOAL_TERNARY_VEC_LOOP
#endif

/* Each kernel is built for AVX-512, AVX2 and the baseline and picked at
 * load time (the AVX-512 build by its x86-64 level under gcc, by feature
 * under clang, as in int8.c); ThreadSanitizer builds go without (see
 * algos/reduce.c). */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHOAL_TERNARY_NO_IFUNC 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SHOAL_TERNARY_NO_IFUNC 1
#endif
#if defined(__x86_64__) && defined(__clang__) && !defined(SHOAL_TERNARY_NO_IFUNC)
#define SHOAL_TERNARY_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(SHOAL_TERNARY_NO_IFUNC)
#define SHOAL_TERNARY_KERNEL                                                               \
    __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define SHOAL_TERNARY_KERNEL
#endif

#define SHOAL_TERNARY_INLINE static inline __attribute__((always_inline))

/* The saturation bounds and the wire access (shoal_ternary_load, _store)
 * are in ternary_elem.h, shared with the CUDA module. */

/* Whether a 16-bit word keeps its low byte first in memory. */
SHOAL_TERNARY_INLINE int shoal_ternary_little_endian(void)
{
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
    return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
#else
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
#endif
}

/* ---- scalar reference ---- */

/* Value by value through ternary_elem.h: the functions the CUDA module's
 * codec kernel runs. */
static void shoal_ternary_encode_ref(const shoal_codec_t *c, void *wire, const float *src,
                                     const float *addend, float *residual, size_t count,
                                     size_t first)
{
    const uint32_t key = shoal_codec_key(c->seed, c->step);
    for (size_t i = 0; i < count; i++) {
        float x = addend ? src[i] + addend[i] : src[i];
        float scale = shoal_ternary_scale_of(c->scales, c->block, (uint64_t)first + i);
        int32_t k = shoal_ternary_code(c->round, key, x, scale, (uint64_t)first + i);
        shoal_ternary_store(wire, i, k, c->wide);
        if (residual)
            residual[i] = shoal_ternary_residual(x, k, scale);
    }
}

static void shoal_ternary_add_encode_ref(const shoal_codec_t *c, void *wire_out,
                                         const void *wire_in, const float *local,
                                         const float *addend, float *residual, size_t count,
                                         size_t first)
{
    const uint32_t key = shoal_codec_key(c->seed, c->step);
    const int32_t max = c->wide ? SHOAL_TERNARY_MAX16 : SHOAL_TERNARY_MAX8;
    for (size_t i = 0; i < count; i++) {
        float x = addend ? local[i] + addend[i] : local[i];
        float scale = shoal_ternary_scale_of(c->scales, c->block, (uint64_t)first + i);
        int32_t k = shoal_ternary_code(c->round, key, x, scale, (uint64_t)first + i);
        int32_t in = shoal_ternary_load(wire_in, i, c->wide);
        int32_t sum = shoal_ternary_add_sat(in, k, max);
        shoal_ternary_store(wire_out, i, sum, c->wide);
        if (residual)
            residual[i] = shoal_ternary_residual(x, sum - in, scale);
    }
}

static void shoal_ternary_decode_ref(const shoal_codec_t *c, float *dst, const void *wire,
                                     size_t count, size_t first)
{
    for (size_t i = 0; i < count; i++)
        dst[i] = shoal_ternary_decode_value(
            shoal_ternary_load(wire, i, c->wide),
            shoal_ternary_scale_of(c->scales, c->block, (uint64_t)first + i));
}

static void shoal_ternary_absmax_ref(float *out, const float *src, const float *add,
                                     size_t count, size_t block)
{
    for (size_t b = 0; b * block < count; b++)
        out[b] = shoal_ternary_block_absmax(src, add, b * block,
                                            count - b * block < block ? count : (b + 1) * block);
}

/* ---- kernels ---- */

/* shoal_codec_uniform(key, index) for index = hi * 2^32 + lo, with
 * hiterm = hi * 0x9e3779b9 computed once per segment: the same mix in
 * 32-bit arithmetic only. The top 24 bits convert through a signed int,
 * which x86 converts in vector registers (unsigned needs AVX-512). The
 * tests check it against the header's function. */
SHOAL_TERNARY_INLINE float shoal_ternary_uniform(uint32_t key, uint32_t lo, uint32_t hiterm)
{
    uint32_t x = lo ^ key;
    x += hiterm;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return (float)(int32_t)(x >> 8) * (1.0f / 16777216.0f);
}

/* One segment of a run: n values (at most a block) whose scale and whose
 * index's top half are constant; lo is the low half of the first value's
 * index. The flags are constants in every caller, so each kernel gets a
 * loop of its own without tests inside.
 *
 * The division uses div, which is the scale or, for a scale that is not
 * > 0, infinity: |x| / inf is 0 (NaN for an infinite x), and so is the
 * code, as the reference has it. p is not clamped: u < 1 and 0.5 <= 1 make
 * the comparisons the same with and without. The code is up (0 or 1) with
 * x's sign bit applied in integer arithmetic, which differs from the
 * reference's x < 0 only for -0 and NaN, whose up is 0. The counter is
 * 32 bits wide (n <= block), as is the random numbers' index, so that the
 * vector loop carries no 64-bit lanes. */
SHOAL_TERNARY_INLINE void shoal_ternary_segment(unsigned char *out,
                                                const unsigned char *in, const float *src,
                                                const float *addend, float *res, size_t n,
                                                float scale, uint32_t key, uint32_t lo,
                                                uint32_t hiterm, int wide, int add, int nearest,
                                                int has_res, int has_add)
{
    const float div = scale > 0.0f ? scale : INFINITY;
    const int32_t max = wide ? SHOAL_TERNARY_MAX16 : SHOAL_TERNARY_MAX8;
    uint32_t n32 = (uint32_t)n;
    SHOAL_TERNARY_VEC_LOOP
    for (uint32_t i = 0; i < n32; i++) {
        float x = has_add ? src[i] + addend[i] : src[i];
        float p = fabsf(x) / div;
        int32_t up = nearest ? p >= 0.5f : shoal_ternary_uniform(key, lo + i, hiterm) < p;
        uint32_t bits;
        memcpy(&bits, &x, sizeof(bits));
        int32_t neg = (int32_t)(bits >> 31);
        int32_t k = (up ^ -neg) + neg;
        int32_t q = k;
        if (add) {
            int32_t w = shoal_ternary_load(in, i, wide);
            int32_t sum = w + k;
            sum = sum > max ? max : sum;
            sum = sum < -max ? -max : sum;
            shoal_ternary_store(out, i, sum, wide);
            q = sum - w;
        } else {
            shoal_ternary_store(out, i, k, wide);
        }
        if (has_res)
            res[i] = x - (float)q * scale;
    }
}

/* A whole run of encode (add = 0) or add_encode (add = 1), cut into
 * segments at block boundaries and where the low 32 bits of the index
 * wrap around. The block of the first value is found by one division;
 * the others follow by counting (a division per block would cost as much
 * as a quarter of the work). */
SHOAL_TERNARY_INLINE void shoal_ternary_run(const shoal_codec_t *c, void *wire_out,
                                            const void *wire_in, const float *x,
                                            const float *addend, float *res, size_t count,
                                            size_t first, int wide, int add, int nearest,
                                            int has_res, int has_add)
{
    const uint32_t key = shoal_codec_key(c->seed, c->step);
    const size_t block = c->block;
    const size_t width = wide ? 2 : 1;
    unsigned char *out = wire_out;
    const unsigned char *in = wire_in;
    size_t b = first / block, at = first % block; /* block and place in it */
    for (size_t i = 0; i < count;) {
        uint64_t index = (uint64_t)first + i;
        size_t n = block - at;
        uint64_t to_wrap = ((uint64_t)1 << 32) - (uint32_t)index;
        if (n > to_wrap)
            n = (size_t)to_wrap;
        if (n > count - i)
            n = count - i;
        shoal_ternary_segment(out + i * width, add ? in + i * width : NULL, x + i,
                              has_add ? addend + i : NULL, has_res ? res + i : NULL, n,
                              c->scales[b], key, (uint32_t)index,
                              (uint32_t)(index >> 32) * 0x9e3779b9u, wide, add, nearest,
                              has_res, has_add);
        i += n;
        at += n;
        if (at == block) {
            at = 0;
            b++;
        }
    }
}

typedef void (*shoal_ternary_kernel_t)(const shoal_codec_t *c, void *wire_out,
                                       const void *wire_in, const float *x,
                                       const float *addend, float *res, size_t count,
                                       size_t first);

#define SHOAL_TERNARY_KERNEL_DEFINE(name, wide, add, nearest, has_res, has_add)        \
    SHOAL_TERNARY_KERNEL static void name(const shoal_codec_t *c, void *wire_out,      \
                                          const void *wire_in, const float *x,         \
                                          const float *addend, float *res,             \
                                          size_t count, size_t first)                  \
    {                                                                                  \
        shoal_ternary_run(c, wire_out, wire_in, x, addend, res, count, first, wide,    \
                          add, nearest, has_res, has_add);                             \
    }

/* Indexed [wide][add][nearest][has_res][has_add]: the fused error
 * feedback (an addend, which needs a residual) is a kernel of its own. */
#define SHOAL_TERNARY_KERNELS_DEFINE(w, a)                                             \
    SHOAL_TERNARY_KERNEL_DEFINE(shoal_ternary_k##w##a##000, w, a, 0, 0, 0)             \
    SHOAL_TERNARY_KERNEL_DEFINE(shoal_ternary_k##w##a##001, w, a, 0, 0, 1)             \
    SHOAL_TERNARY_KERNEL_DEFINE(shoal_ternary_k##w##a##010, w, a, 0, 1, 0)             \
    SHOAL_TERNARY_KERNEL_DEFINE(shoal_ternary_k##w##a##011, w, a, 0, 1, 1)             \
    SHOAL_TERNARY_KERNEL_DEFINE(shoal_ternary_k##w##a##100, w, a, 1, 0, 0)             \
    SHOAL_TERNARY_KERNEL_DEFINE(shoal_ternary_k##w##a##101, w, a, 1, 0, 1)             \
    SHOAL_TERNARY_KERNEL_DEFINE(shoal_ternary_k##w##a##110, w, a, 1, 1, 0)             \
    SHOAL_TERNARY_KERNEL_DEFINE(shoal_ternary_k##w##a##111, w, a, 1, 1, 1)

SHOAL_TERNARY_KERNELS_DEFINE(0, 0)
SHOAL_TERNARY_KERNELS_DEFINE(0, 1)
SHOAL_TERNARY_KERNELS_DEFINE(1, 0)
SHOAL_TERNARY_KERNELS_DEFINE(1, 1)

#define SHOAL_TERNARY_KERNEL_ROW(w, a)                                                 \
    {                                                                                  \
        {{shoal_ternary_k##w##a##000, shoal_ternary_k##w##a##001},                     \
         {shoal_ternary_k##w##a##010, shoal_ternary_k##w##a##011}},                    \
        {{shoal_ternary_k##w##a##100, shoal_ternary_k##w##a##101},                     \
         {shoal_ternary_k##w##a##110, shoal_ternary_k##w##a##111}},                    \
    }

static const shoal_ternary_kernel_t shoal_ternary_kernels[2][2][2][2][2] = {
    {SHOAL_TERNARY_KERNEL_ROW(0, 0), SHOAL_TERNARY_KERNEL_ROW(0, 1)},
    {SHOAL_TERNARY_KERNEL_ROW(1, 0), SHOAL_TERNARY_KERNEL_ROW(1, 1)},
};

static shoal_ternary_kernel_t shoal_ternary_kernel(const shoal_codec_t *c, int add,
                                                   const float *addend, const float *residual)
{
    return shoal_ternary_kernels[c->wide != 0][add][c->round == SHOAL_ROUND_NEAREST]
                                [residual != NULL][addend != NULL];
}

SHOAL_TERNARY_INLINE void shoal_ternary_decode_run(const shoal_codec_t *c, float *dst,
                                                   const unsigned char *w, size_t count,
                                                   size_t first, int wide)
{
    const size_t block = c->block;
    size_t b = first / block, n = block - first % block;
    for (size_t i = 0; i < count; i += n, n = block, b++) {
        if (n > count - i)
            n = count - i;
        const float scale = c->scales[b];
        float *d = dst + i;
        const unsigned char *s = w + i * (wide ? 2 : 1);
        SHOAL_TERNARY_VEC_LOOP
        for (size_t j = 0; j < n; j++)
            d[j] = (float)shoal_ternary_load(s, j, wide) * scale;
    }
}

SHOAL_TERNARY_KERNEL static void shoal_ternary_decode8(const shoal_codec_t *c, float *dst,
                                                       const void *wire, size_t count,
                                                       size_t first)
{
    shoal_ternary_decode_run(c, dst, wire, count, first, 0);
}

SHOAL_TERNARY_KERNEL static void shoal_ternary_decode16(const shoal_codec_t *c, float *dst,
                                                        const void *wire, size_t count,
                                                        size_t first)
{
    shoal_ternary_decode_run(c, dst, wire, count, first, 1);
}

/* The maximum of |x| over the bit patterns: for numbers, the order of
 * |x|'s bits as unsigned integers is the order of |x|, and integer maxima
 * vectorize where float ones (NaN, signed zeros) do not. NaN counts as 0,
 * as the reference's comparison ignores it. */
SHOAL_TERNARY_INLINE void shoal_ternary_absmax_run(float *out, const float *src,
                                                   const float *add, size_t count,
                                                   size_t block, int has_add)
{
    for (size_t b = 0, i = 0; i < count; b++, i += block) {
        size_t n = count - i < block ? count - i : block;
        const float *s = src + i;
        const float *a = has_add ? add + i : NULL;
        uint32_t m = 0;
        SHOAL_TERNARY_VEC_LOOP
        for (size_t j = 0; j < n; j++) {
            float x = has_add ? s[j] + a[j] : s[j];
            uint32_t u;
            memcpy(&u, &x, sizeof(u));
            u &= 0x7fffffffu;
            u &= -(uint32_t)(u <= 0x7f800000u); /* a mask, not a branch */
            m = u > m ? u : m;
        }
        memcpy(out + b, &m, sizeof(m));
    }
}

SHOAL_TERNARY_KERNEL static void shoal_ternary_absmax(float *out, const float *src,
                                                      size_t count, size_t block)
{
    shoal_ternary_absmax_run(out, src, NULL, count, block, 0);
}

/* The maxima of src + add without writing the sum: error feedback's
 * scales, fused with the residual's addition. */
SHOAL_TERNARY_KERNEL static void shoal_ternary_absmax_add(float *out, const float *src,
                                                          const float *add, size_t count,
                                                          size_t block)
{
    shoal_ternary_absmax_run(out, src, add, count, block, 1);
}

/* ---- the packed wire ----
 *
 * Codes of 4 bits are the 8-bit codes, packed: each operation runs the
 * 8-bit one over runs of SHOAL_TERNARY_RUN values (an even number, so a run
 * starts on a whole byte) in a buffer on the stack, and packs or unpacks
 * it. The results, residuals included, are thus bitwise those of the 8-bit
 * wire whenever the sums fit 4 bits, and both kernels (SIMD or reference)
 * agree as theirs do. A sum beyond +-7 (more than 7 ranks) saturates at the
 * packing, after the residual was computed for the unsaturated code: the
 * caller must not let that happen. The packing and unpacking are kernels
 * too: done a byte at a time they cost as much as the codec itself. */
#define SHOAL_TERNARY_RUN 1024

/* Both directions go through pairs of codes read or written as one 16-bit
 * word (code 2j in the low byte: the packed wire's order on a
 * little-endian host; memcpy keeps it in the host's order elsewhere), so
 * that the loops are contiguous and vectorise; an odd count's last code
 * is handled alone. The clamp to +-7 is a loop of its own over the bytes,
 * for the same reason. */
SHOAL_TERNARY_INLINE uint16_t shoal_ternary_pair_get(const int8_t *codes, size_t j)
{
    uint16_t v;
    memcpy(&v, codes + 2 * j, sizeof(v));
    return v;
}

SHOAL_TERNARY_INLINE void shoal_ternary_pair_set(int8_t *codes, size_t j, uint16_t v)
{
    memcpy(codes + 2 * j, &v, sizeof(v));
}

/* The byte of a pair's codes, low code first: each its low 4 bits. */
SHOAL_TERNARY_INLINE unsigned char shoal_ternary_nibbles(int lo, int hi)
{
    return (unsigned char)((lo & 0xf) | (hi & 0xf) << 4);
}

/* The codes of a pair's byte, sign-extended from 4 bits to 8, as a
 * 16-bit word of two codes. */
SHOAL_TERNARY_INLINE uint16_t shoal_ternary_unnibble(unsigned char b)
{
    uint16_t lo = (uint16_t)(((b & 0xf) ^ 8) - 8) & 0xff;
    uint16_t hi = (uint16_t)(((b >> 4) ^ 8) - 8) & 0xff;
    return (uint16_t)(lo | hi << 8);
}

SHOAL_TERNARY_KERNEL static void shoal_ternary_pack(unsigned char *w, int8_t *codes, size_t n)
{
    /* The codes are this call's scratch: clamped in place. */
    SHOAL_TERNARY_VEC_LOOP
    for (size_t j = 0; j < n; j++) {
        int8_t v = codes[j];
        v = v > 7 ? 7 : v;
        codes[j] = v < -7 ? -7 : v;
    }
    size_t pairs = n / 2;
    if (shoal_ternary_little_endian()) {
        SHOAL_TERNARY_VEC_LOOP
        for (size_t j = 0; j < pairs; j++) {
            uint16_t v = shoal_ternary_pair_get(codes, j);
            w[j] = (unsigned char)((v & 0xf) | (v >> 4 & 0xf0));
        }
    } else {
        for (size_t j = 0; j < pairs; j++)
            w[j] = shoal_ternary_nibbles(codes[2 * j], codes[2 * j + 1]);
    }
    if (n % 2)
        w[pairs] = shoal_ternary_nibbles(codes[n - 1], 0);
}

SHOAL_TERNARY_KERNEL static void shoal_ternary_unpack(int8_t *codes, const unsigned char *w,
                                                      size_t n)
{
    size_t pairs = n / 2;
    if (shoal_ternary_little_endian()) {
        SHOAL_TERNARY_VEC_LOOP
        for (size_t j = 0; j < pairs; j++)
            shoal_ternary_pair_set(codes, j, shoal_ternary_unnibble(w[j]));
    } else {
        for (size_t j = 0; j < pairs; j++) {
            uint16_t v = shoal_ternary_unnibble(w[j]);
            codes[2 * j] = (int8_t)(v & 0xff);
            codes[2 * j + 1] = (int8_t)(v >> 8);
        }
    }
    if (n % 2)
        codes[n - 1] = (int8_t)(shoal_ternary_unnibble(w[pairs]) & 0xff);
}

static void shoal_ternary_encode(const shoal_codec_t *c, void *wire, const float *src,
                                 const float *addend, float *residual, size_t count,
                                 size_t first);
static void shoal_ternary_add_encode(const shoal_codec_t *c, void *wire_out,
                                     const void *wire_in, const float *local,
                                     const float *addend, float *residual, size_t count,
                                     size_t first);
static void shoal_ternary_decode(const shoal_codec_t *c, float *dst, const void *wire,
                                 size_t count, size_t first);

/* op: 0 encode, 1 add_encode, 2 decode, through the 8-bit wire. */
static void shoal_ternary_packed(const shoal_codec_t *c, int op, void *wire_out,
                                 const void *wire_in, const float *src, const float *addend,
                                 float *dst, float *residual, size_t count, size_t first)
{
    shoal_codec_t c8 = *c;
    c8.packed = 0;
    c8.wide = 0;
    int8_t codes[SHOAL_TERNARY_RUN];
    for (size_t off = 0; off < count; off += SHOAL_TERNARY_RUN) {
        size_t n = count - off < SHOAL_TERNARY_RUN ? count - off : SHOAL_TERNARY_RUN;
        float *res = residual ? residual + off : NULL;
        const float *add = addend ? addend + off : NULL;
        if (op != 0)
            shoal_ternary_unpack(codes, (const unsigned char *)wire_in + off / 2, n);
        if (op == 0)
            shoal_ternary_encode(&c8, codes, src + off, add, res, n, first + off);
        else if (op == 1)
            shoal_ternary_add_encode(&c8, codes, codes, src + off, add, res, n, first + off);
        else
            shoal_ternary_decode(&c8, dst + off, codes, n, first + off);
        if (op != 2)
            shoal_ternary_pack((unsigned char *)wire_out + off / 2, codes, n);
    }
}

/* ---- the codec ---- */

static size_t shoal_ternary_wire_bytes(const shoal_codec_t *c, size_t count)
{
    if (c->packed && c->wide)
        return 0;
    return c->packed ? (count + 1) / 2 : count * (c->wide ? 2 : 1);
}

static void shoal_ternary_encode(const shoal_codec_t *c, void *wire, const float *src,
                                 const float *addend, float *residual, size_t count,
                                 size_t first)
{
    if (c->packed)
        shoal_ternary_packed(c, 0, wire, NULL, src, addend, NULL, residual, count, first);
    else if (shoal_codec_simd_enabled())
        shoal_ternary_kernel(c, 0, addend, residual)(c, wire, NULL, src, addend, residual,
                                                     count, first);
    else
        shoal_ternary_encode_ref(c, wire, src, addend, residual, count, first);
}

static void shoal_ternary_add_encode(const shoal_codec_t *c, void *wire_out,
                                     const void *wire_in, const float *local,
                                     const float *addend, float *residual, size_t count,
                                     size_t first)
{
    if (c->packed)
        shoal_ternary_packed(c, 1, wire_out, wire_in, local, addend, NULL, residual, count,
                             first);
    else if (shoal_codec_simd_enabled())
        shoal_ternary_kernel(c, 1, addend, residual)(c, wire_out, wire_in, local, addend,
                                                     residual, count, first);
    else
        shoal_ternary_add_encode_ref(c, wire_out, wire_in, local, addend, residual, count,
                                     first);
}

static void shoal_ternary_decode(const shoal_codec_t *c, float *dst, const void *wire,
                                 size_t count, size_t first)
{
    if (c->packed)
        shoal_ternary_packed(c, 2, NULL, wire, NULL, NULL, dst, NULL, count, first);
    else if (!shoal_codec_simd_enabled())
        shoal_ternary_decode_ref(c, dst, wire, count, first);
    else if (c->wide)
        shoal_ternary_decode16(c, dst, wire, count, first);
    else
        shoal_ternary_decode8(c, dst, wire, count, first);
}

const shoal_codec_ops_t shoal_codec_ternary = {
    .size = sizeof(shoal_codec_ops_t),
    .name = "ternary",
    .wire_bytes = shoal_ternary_wire_bytes,
    .encode = shoal_ternary_encode,
    .decode = shoal_ternary_decode,
    .add_encode = shoal_ternary_add_encode,
};

void shoal_codec_block_absmax_sum(float *out, const float *src, const float *add,
                                  size_t count, size_t block)
{
    if (!shoal_codec_simd_enabled())
        shoal_ternary_absmax_ref(out, src, add, count, block);
    else if (add)
        shoal_ternary_absmax_add(out, src, add, count, block);
    else
        shoal_ternary_absmax(out, src, count, block);
}

void shoal_codec_block_absmax(float *out, const float *src, size_t count, size_t block)
{
    shoal_codec_block_absmax_sum(out, src, NULL, count, block);
}

/* Two passes in double: the mean, then the mean square of the deviations,
 * so that a large mean does not cancel the deviations away. Each pass sums
 * into SHOAL_TERNARY_LANES accumulators (value i into lane i % LANES, then
 * the lanes in order): independent additions run in parallel, in vector
 * registers, and the order is fixed, so the result is the same on every
 * machine and in every build of the kernel. */
#define SHOAL_TERNARY_LANES 8

/* Value i of src (+ add): the fp32 sum, as error feedback forms it. */
SHOAL_TERNARY_INLINE double shoal_ternary_at(const float *src, const float *add, size_t i)
{
    return add ? (double)(src[i] + add[i]) : (double)src[i];
}

SHOAL_TERNARY_KERNEL static double shoal_ternary_sum(const float *src, const float *add,
                                                    size_t count, double mean, int square)
{
    double lane[SHOAL_TERNARY_LANES] = {0.0};
    size_t i = 0;
    for (; i + SHOAL_TERNARY_LANES <= count; i += SHOAL_TERNARY_LANES)
        for (size_t j = 0; j < SHOAL_TERNARY_LANES; j++) {
            double d = shoal_ternary_at(src, add, i + j) - mean;
            lane[j] += square ? d * d : d;
        }
    for (size_t j = 0; i + j < count; j++) {
        double d = shoal_ternary_at(src, add, i + j) - mean;
        lane[j] += square ? d * d : d;
    }
    double sum = 0.0;
    for (size_t j = 0; j < SHOAL_TERNARY_LANES; j++)
        sum += lane[j];
    return sum;
}

float shoal_codec_clip_bound_sum(const float *src, const float *add, size_t count, float k)
{
    if (!(k > 0.0f) || count == 0)
        return 0.0f;
    const double mean = shoal_ternary_sum(src, add, count, 0.0, 0) / (double)count;
    const double var = shoal_ternary_sum(src, add, count, mean, 1) / (double)count;
    const double bound = (double)k * sqrt(var);
    /* No clipping when there is nothing sensible to clip to (NaN or
     * infinite input, or a bound beyond any float). */
    if (!(bound <= FLT_MAX))
        return 0.0f;
    return (float)bound;
}

float shoal_codec_clip_bound(const float *src, size_t count, float k)
{
    return shoal_codec_clip_bound_sum(src, NULL, count, k);
}
