/* int8 block quantisation: shoal_codec_int8 (codec.h).
 *
 * Wire form of a run of count values, nblocks = ceil(count / block):
 *   nblocks fp32 scales, in the host's byte order, then count int8 codes;
 *   the codes of block b start at wire + nblocks * 4 + b * block.
 *   wire_bytes = nblocks * 4 + count. Only the run's last block may be
 *   short. The wire has no alignment requirement.
 *
 * Scale of a block, from amax = max |x| over its values:
 * - a block holding a NaN has scale NaN, else one holding an infinity has
 *   scale +inf. Such a block is "non-finite": its codes are all 0, so every
 *   one of its values decodes to NaN (0 * NaN, 0 * inf), and every residual
 *   of the block is NaN. A NaN or infinity thus never comes back finite, and
 *   spoils its whole block visibly; in add_encode this also catches a
 *   non-finite incoming block or local value and a sum that overflows.
 * - otherwise scale = amax / 127 in fp32. Where amax is so close to FLT_MAX
 *   that 127 * scale would round to infinity, scale is one ulp lower, so
 *   that every code decodes to a finite value. scale is 0 for an all-zero
 *   block, and for amax below 2^-143 (where amax / 127 rounds to 0): the
 *   codes are then 0 and the block decodes to +0.
 *
 * Code of a value x of a finite block: with y = (x * pre) * inv, where
 * inv = 127 / (amax * pre) in fp32, and pre = 1, or 2^64 where
 * amax < 2^-100 (127 / amax could overflow); inv = 0 when scale is 0. The
 * products with pre are exact, so y is x times the rounded inverse of the
 * unrounded amax / 127: as close to x / scale as 1 / scale would be, and
 * independent of scale's own division, so that the two divisions of a block
 * can run side by side. A value costs one multiplication (two in the rare
 * blocks where pre is not 1).
 * - nearest: code = clamp(rint(y), -127, 127), ties to even;
 * - stochastic: code = clamp(floor(y + u), -127, 127), with
 *   u = shoal_codec_uniform(shoal_codec_key(seed, step), first + i) for the
 *   value of index first + i of the tensor. floor(y + u) is evaluated exactly
 *   as floor(y) + (y - floor(y) >= 1 - u), where every operation is exact in
 *   fp32, so rounding up happens with probability frac(y), up to the 2^-24
 *   resolution of u: unbiased.
 * Decode: code * scale in fp32 (a -0 input comes back +0).
 *
 * Error: in a finite block whose scale is a normal float, |x - decode(x)|
 * is at most scale / 2 for nearest and below scale for stochastic, both up
 * to the fp32 roundings of scale, inv, y and the product (together under
 * 2^-15 * scale). Blocks whose scale is subnormal (amax < 127 * 2^-126)
 * lose precision with it: their error is also off by up to 127.5 * 2^-150.
 *
 * add_encode works one block at a time: s = decode(wire_in) + local in
 * fp32, kept on the stack, then s is encoded into wire_out as above, with
 * residual = s - decode(wire_out). A block of wire_in is read whole before
 * the same block of wire_out is written, so wire_out may equal wire_in.
 * encode's residual is src - decode(wire). Both are computed in fp32 from
 * the code as stored (not from the value before the conversion to int8),
 * so they are exactly what decode gives back.
 *
 * With an addend (error feedback fused into the pass), the value is
 * src + addend (encode) or decode(wire_in) + (local + addend)
 * (add_encode), each sum rounded to fp32 once, formed a block at a time
 * on the stack, as add_encode forms its sums: the same bits as a caller
 * adding the two arrays first, without that pass. A block's addend is
 * read before its residual is written, so residual may be addend.
 *
 * A codec whose block is not 32, 64 or 128, or whose round is not one of
 * shoal_round_t, is invalid: wire_bytes gives 0 (which a valid codec never
 * gives for count > 0) and the operations return without touching memory.
 * Rounding assumes the default floating-point environment (round to
 * nearest, subnormals neither flushed nor treated as zero).
 *
 * Two paths give the same bits: a scalar reference, written from the
 * definitions above with nearbyintf and floorf (compress/int8_elem.h,
 * whose block functions the CUDA module's codec kernel runs too), and
 * kernels made of plain
 * loops that the compiler vectorises, built for several x86 targets and
 * picked at load time. The kernels stream: a block (at most 128 values) is
 * read once to find amax and once more, from L1, to quantise it. Their
 * nearest rounding adds 1.5 * 2^23, which rounds any |y| < 2^22 to the
 * nearest integer, ties to even, exactly as nearbyintf does, and leaves the
 * code in the low byte of the sum; stochastic rounding uses floorf, which
 * vectorises from SSE4.1 on. */

/* For the whole file, so that the inline helpers get the same options and
 * still inline into the kernels. gcc's -O2 vectorises only loops that need
 * no scalar epilogue; these are worth its full cost model. Without trapping
 * math gcc computes both sides of a float select, which the rounding needs.
 * Contraction into fused multiply-adds is off in both compilers: it would
 * make the kernels built for FMA targets differ from the reference. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math",     \
                     "fp-contract=off")
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include "compress/codec.h"
#include "compress/int8_elem.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* "Iterations are independent": the pointers of a loop never overlap. */
#if defined(__clang__)
/* The pragma only asks: a build that cannot vectorise a loop (sanitizers,
 * a target without the instructions) must still compile without warning. */
#pragma clang diagnostic ignored "-Wpass-failed"
#define SHOAL_INT8_VEC_LOOP _Pragma("clang loop vectorize(assume_safety) interleave(enable)")
#elif defined(__GNUC__)
#define SHOAL_INT8_VEC_LOOP _Pragma("GCC ivdep")
#else
#define SHOAL_INT8_VEC_LOOP
#endif

/* Each kernel is built for AVX-512, AVX2, SSE4.1 and the x86-64 baseline,
 * and the loader picks one for the CPU (an ifunc). gcc names the AVX-512
 * and SSE4.1 builds by their x86-64 levels: its avx512f build would stay
 * 256 bits wide without AVX512VL's narrowing moves. clang picks arch=
 * builds by CPU model rather than by feature, so it is given features.
 * SSE4.1 matters for its round instruction (floorf). ThreadSanitizer
 * builds go without: the ifunc resolvers it instruments run before its
 * runtime is up. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHOAL_INT8_NO_IFUNC 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SHOAL_INT8_NO_IFUNC 1
#endif
#if defined(__x86_64__) && defined(__clang__) && !defined(SHOAL_INT8_NO_IFUNC)
#define SHOAL_INT8_KERNEL                                                                  \
    __attribute__((target_clones("avx512f", "avx2", "sse4.1", "default")))
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(SHOAL_INT8_NO_IFUNC)
#define SHOAL_INT8_KERNEL                                                                  \
    __attribute__((target_clones("arch=x86-64-v4", "avx2", "arch=x86-64-v2", "default")))
#else
#define SHOAL_INT8_KERNEL
#endif

/* The block helpers must inline into each kernel clone, where they are
 * compiled for its target and for the constant block length. */
#if defined(__GNUC__)
#define SHOAL_INT8_INLINE static inline __attribute__((always_inline))
#else
#define SHOAL_INT8_INLINE static inline
#endif

/* y + 1.5 * 2^23 has units in its last place for any |y| < 2^22. */
#define SHOAL_INT8_ROUND_MAGIC 12582912.0f

/* ---- shared by both paths ---- */

static inline uint32_t shoal_int8_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static inline float shoal_int8_value(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static int shoal_int8_valid(const shoal_codec_t *c)
{
    return (c->block == 32 || c->block == 64 || c->block == 128) &&
           (c->round == SHOAL_ROUND_NEAREST || c->round == SHOAL_ROUND_STOCHASTIC);
}

static size_t shoal_int8_wire_bytes(const shoal_codec_t *c, size_t count)
{
    /* Beyond half the address space the size would overflow; no buffer
     * that large exists. */
    if (!shoal_int8_valid(c) || count > SIZE_MAX / 2)
        return 0;
    return shoal_int8_nblocks(count, c->block) * SHOAL_INT8_SCALE_BYTES + count;
}

/* ---- scalar reference ---- */

/* The reference is int8_elem.h's block functions, block after block: the
 * very code the CUDA module's codec kernel runs, one block per thread. */
static void shoal_int8_encode_ref(const shoal_codec_t *c, unsigned char *wire, const float *src,
                                  const float *add, float *res, size_t count, size_t first)
{
    uint32_t key = shoal_codec_key(c->seed, c->step);
    for (size_t b = 0, nb = shoal_int8_nblocks(count, c->block); b < nb; b++)
        shoal_int8_encode_block_of(wire, src, add, res, count, c->block, c->round, key, first,
                                   b);
}

static void shoal_int8_decode_ref(const shoal_codec_t *c, float *dst, const unsigned char *wire,
                                  size_t count)
{
    for (size_t b = 0, nb = shoal_int8_nblocks(count, c->block); b < nb; b++)
        shoal_int8_decode_block_of(dst, wire, count, c->block, b);
}

static void shoal_int8_add_encode_ref(const shoal_codec_t *c, unsigned char *out,
                                      const unsigned char *in, const float *local,
                                      const float *add, float *res, size_t count, size_t first)
{
    uint32_t key = shoal_codec_key(c->seed, c->step);
    for (size_t b = 0, nb = shoal_int8_nblocks(count, c->block); b < nb; b++)
        shoal_int8_add_encode_block_of(out, in, local, add, res, count, c->block, c->round, key,
                                       first, b);
}

/* ---- kernels ---- */

/* max |x| as bits: for non-negative floats the order of the bit patterns
 * as unsigned integers is that of the values, and every NaN is above +inf,
 * so this finds NaN, then inf, then the largest magnitude, in integer
 * instructions that vectorise. */
SHOAL_INT8_INLINE uint32_t shoal_int8_amax_bits(const float *restrict x, size_t n)
{
    uint32_t m = 0;
    SHOAL_INT8_VEC_LOOP
    for (size_t i = 0; i < n; i++) {
        uint32_t a = shoal_int8_bits(x[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* Rounding to the nearest integer: for |y| < 2^22, t = y + 1.5 * 2^23 has
 * a unit in its last place of 1, so the addition rounds y to the nearest
 * integer q, ties to even; t's bits are those of 1.5 * 2^23 plus q, so its
 * low byte is q as an int8, and t - 1.5 * 2^23 is q as a float (never -0). */
#define SHOAL_INT8_MAGIC_BITS 0x4b400000

SHOAL_INT8_INLINE float shoal_int8_magic(float y)
{
    return y + SHOAL_INT8_ROUND_MAGIC;
}

SHOAL_INT8_INLINE int32_t shoal_int8_clamp(int32_t q)
{
    q = q < 127 ? q : 127;
    return q > -127 ? q : -127;
}

/* floor(y + u), exactly (see the top), before the clamp. floorf is one
 * instruction from SSE4.1 on (vroundps), which the AVX2 and AVX-512 builds
 * have; the baseline build calls it. */
SHOAL_INT8_INLINE int32_t shoal_int8_stochastic(float y, float u)
{
    float fl = floorf(y);
    return (int32_t)(y - fl >= 1.0f - u ? fl + 1.0f : fl);
}

/* The loops below are for the blocks where pre = 1 and y = x * inv. There
 * |y| <= amax * inv <= 127 (1 + 2^-23) < 127.5 (127 / amax rounded twice),
 * so nearest needs no clamp and its code is t's low byte. */
SHOAL_INT8_INLINE void shoal_int8_quant_nearest(int8_t *restrict codes, float *restrict res,
                                                const float *restrict x, size_t n,
                                                shoal_int8_params_t p)
{
    if (res) {
        SHOAL_INT8_VEC_LOOP
        for (size_t i = 0; i < n; i++) {
            float t = shoal_int8_magic(x[i] * p.inv);
            codes[i] = (int8_t)shoal_int8_bits(t);
            res[i] = x[i] - (t - SHOAL_INT8_ROUND_MAGIC) * p.scale;
        }
    } else {
        SHOAL_INT8_VEC_LOOP
        for (size_t i = 0; i < n; i++)
            codes[i] = (int8_t)shoal_int8_bits(shoal_int8_magic(x[i] * p.inv));
    }
}

/* u of value i of a block whose indices all share their high 32 bits:
 * shoal_codec_uniform(key, index + i) with lo and hi the low and high
 * words of index, written in 32-bit lanes, which vectorise. */
SHOAL_INT8_INLINE float shoal_int8_uniform_lane(uint32_t key, uint32_t lo, uint32_t hi_mix,
                                               uint32_t i)
{
    uint32_t x = (lo + i) ^ key;
    x += hi_mix;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    /* x >> 8 < 2^24: the signed conversion is exact and vectorises. */
    return (float)(int32_t)(x >> 8) * (1.0f / 16777216.0f);
}

/* Stochastic rounding can reach 128 from y just above 127: it is clamped.
 * For blocks whose indices share their high 32 bits (the caller sees to
 * it), the random numbers are made in the same loop. */
SHOAL_INT8_INLINE void shoal_int8_quant_stochastic(int8_t *restrict codes, float *restrict res,
                                                   const float *restrict x, size_t n,
                                                   shoal_int8_params_t p, uint32_t key,
                                                   uint64_t index)
{
    uint32_t lo = (uint32_t)index, hi_mix = (uint32_t)(index >> 32) * 0x9e3779b9u;
    uint32_t len = (uint32_t)n;
    if (res) {
        SHOAL_INT8_VEC_LOOP
        for (uint32_t i = 0; i < len; i++) {
            float u = shoal_int8_uniform_lane(key, lo, hi_mix, i);
            int32_t q = shoal_int8_clamp(shoal_int8_stochastic(x[i] * p.inv, u));
            codes[i] = (int8_t)q;
            res[i] = x[i] - (float)q * p.scale;
        }
    } else {
        SHOAL_INT8_VEC_LOOP
        for (uint32_t i = 0; i < len; i++) {
            float u = shoal_int8_uniform_lane(key, lo, hi_mix, i);
            codes[i] = (int8_t)shoal_int8_clamp(shoal_int8_stochastic(x[i] * p.inv, u));
        }
    }
}

/* The blocks that the loops above do not take, one value at a time, with
 * y = (x * pre) * inv and the clamp for both roundings: blocks with
 * amax < 2^-100, and the stochastic block in 2^32 values whose indices
 * cross into the next high word. */
static void shoal_int8_quant_slow(int8_t *codes, float *res, const float *x, size_t n,
                                  shoal_int8_params_t p, shoal_round_t round, uint32_t key,
                                  uint64_t index)
{
    for (size_t i = 0; i < n; i++) {
        float y = (x[i] * p.pre) * p.inv;
        int32_t q = round == SHOAL_ROUND_NEAREST
                        ? (int32_t)shoal_int8_bits(shoal_int8_magic(y)) - SHOAL_INT8_MAGIC_BITS
                        : shoal_int8_stochastic(y, shoal_codec_uniform(key, index + i));
        q = shoal_int8_clamp(q);
        codes[i] = (int8_t)q;
        if (res)
            res[i] = x[i] - (float)q * p.scale;
    }
}

/* max |x| as bits for any n, with the loops of the full block lengths
 * compiled for their constant length: unrolled, without remainders. */
SHOAL_INT8_INLINE uint32_t shoal_int8_amax_any(const float *restrict x, size_t n)
{
    switch (n) {
    case 32: return shoal_int8_amax_bits(x, 32);
    case 64: return shoal_int8_amax_bits(x, 64);
    case 128: return shoal_int8_amax_bits(x, 128);
    default: return shoal_int8_amax_bits(x, n);
    }
}

/* Quantise the n values of x into block b with its parameters p. */
SHOAL_INT8_INLINE void shoal_int8_quant_block(unsigned char *wire, int8_t *restrict codes,
                                             size_t b, const float *restrict x,
                                             float *restrict res, size_t n,
                                             shoal_int8_params_t p, shoal_round_t round,
                                             uint32_t key, uint64_t index)
{
    shoal_int8_scale_set(wire, b, p.scale);
    if (!p.finite) {
        memset(codes, 0, n);
        if (res)
            for (size_t i = 0; i < n; i++)
                res[i] = NAN;
    } else if (p.pre != 1.0f || (round == SHOAL_ROUND_STOCHASTIC &&
                                  (uint64_t)(uint32_t)index + n > UINT64_C(1) << 32)) {
        shoal_int8_quant_slow(codes, res, x, n, p, round, key, index);
    } else if (round == SHOAL_ROUND_STOCHASTIC) {
        shoal_int8_quant_stochastic(codes, res, x, n, p, key, index);
    } else {
        shoal_int8_quant_nearest(codes, res, x, n, p);
    }
}

SHOAL_INT8_INLINE void shoal_int8_quant_any(unsigned char *wire, int8_t *codes, size_t b,
                                           const float *x, float *res, size_t n,
                                           shoal_int8_params_t p, shoal_round_t round,
                                           uint32_t key, uint64_t index)
{
    switch (n) {
    case 32: shoal_int8_quant_block(wire, codes, b, x, res, 32, p, round, key, index); break;
    case 64: shoal_int8_quant_block(wire, codes, b, x, res, 64, p, round, key, index); break;
    case 128: shoal_int8_quant_block(wire, codes, b, x, res, 128, p, round, key, index); break;
    default: shoal_int8_quant_block(wire, codes, b, x, res, n, p, round, key, index); break;
    }
}

/* The kernels work one block ahead: the parameters of block b + 1 (its
 * amax, then two divisions) are computed before block b is quantised, so
 * that their latency overlaps that work instead of holding up the
 * quantisation that needs them. Block b + 1 is then still in L1. */
SHOAL_INT8_KERNEL static void shoal_int8_encode_simd(const shoal_codec_t *c, unsigned char *wire,
                                                     const float *src, float *res, size_t count,
                                                     size_t first)
{
    size_t block = c->block, nb = shoal_int8_nblocks(count, block);
    shoal_round_t round = c->round;
    int8_t *codes = (int8_t *)(wire + nb * SHOAL_INT8_SCALE_BYTES);
    uint32_t key = shoal_codec_key(c->seed, c->step);
    size_t n = count < block ? count : block;
    shoal_int8_params_t next = shoal_int8_params(shoal_int8_value(shoal_int8_amax_any(src, n)));
    for (size_t b = 0, base = 0; b < nb; b++, base += block) {
        shoal_int8_params_t p = next;
        size_t len = n;
        if (b + 1 < nb) {
            n = count - base - block < block ? count - base - block : block;
            next = shoal_int8_params(shoal_int8_value(shoal_int8_amax_any(src + base + block, n)));
        }
        shoal_int8_quant_any(wire, codes + base, b, src + base, res ? res + base : NULL, len, p,
                             round, key, (uint64_t)first + base);
    }
}

/* x = src + add of one block into s, returning max |x| as bits (as
 * amax_bits): the addition and the maximum in one loop. */
SHOAL_INT8_INLINE uint32_t shoal_int8_sum_block(float *restrict s, const float *restrict src,
                                               const float *restrict add, size_t n)
{
    uint32_t m = 0;
    SHOAL_INT8_VEC_LOOP
    for (size_t i = 0; i < n; i++) {
        float v = src[i] + add[i];
        s[i] = v;
        uint32_t a = shoal_int8_bits(v) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

SHOAL_INT8_INLINE uint32_t shoal_int8_sum_any(float *restrict s, const float *restrict src,
                                             const float *restrict add, size_t n)
{
    switch (n) {
    case 32: return shoal_int8_sum_block(s, src, add, 32);
    case 64: return shoal_int8_sum_block(s, src, add, 64);
    case 128: return shoal_int8_sum_block(s, src, add, 128);
    default: return shoal_int8_sum_block(s, src, add, n);
    }
}

/* encode of src + add, fused: one block ahead as encode, the sums of two
 * blocks on the stack (as add_encode). Block b's residual is written after
 * blocks b and b + 1 of add were read, and before block b + 2 is: res may
 * be add. */
SHOAL_INT8_KERNEL static void shoal_int8_encode_add_simd(const shoal_codec_t *c,
                                                         unsigned char *wire, const float *src,
                                                         const float *add, float *res,
                                                         size_t count, size_t first)
{
    size_t block = c->block, nb = shoal_int8_nblocks(count, block);
    shoal_round_t round = c->round;
    int8_t *codes = (int8_t *)(wire + nb * SHOAL_INT8_SCALE_BYTES);
    uint32_t key = shoal_codec_key(c->seed, c->step);
    float s[2][SHOAL_INT8_MAX_BLOCK];
    size_t n = count < block ? count : block;
    shoal_int8_params_t next =
        shoal_int8_params(shoal_int8_value(shoal_int8_sum_any(s[0], src, add, n)));
    for (size_t b = 0, base = 0; b < nb; b++, base += block) {
        shoal_int8_params_t p = next;
        size_t len = n;
        if (b + 1 < nb) {
            size_t nbase = base + block;
            n = count - nbase < block ? count - nbase : block;
            next = shoal_int8_params(shoal_int8_value(
                shoal_int8_sum_any(s[(b + 1) % 2], src + nbase, add + nbase, n)));
        }
        shoal_int8_quant_any(wire, codes + base, b, s[b % 2], res ? res + base : NULL, len, p,
                             round, key, (uint64_t)first + base);
    }
}

SHOAL_INT8_INLINE void shoal_int8_decode_block(float *restrict dst, const int8_t *restrict codes,
                                              float scale, size_t n)
{
    SHOAL_INT8_VEC_LOOP
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)codes[i] * scale;
}

SHOAL_INT8_KERNEL static void shoal_int8_decode_simd(const shoal_codec_t *c, float *dst,
                                                     const unsigned char *wire, size_t count)
{
    size_t block = c->block;
    const int8_t *codes =
        (const int8_t *)(wire + shoal_int8_nblocks(count, block) * SHOAL_INT8_SCALE_BYTES);
    for (size_t b = 0, base = 0; base < count; b++, base += block) {
        size_t n = count - base < block ? count - base : block;
        float scale = shoal_int8_scale_get(wire, b);
        switch (n) {
        case 32: shoal_int8_decode_block(dst + base, codes + base, scale, 32); break;
        case 64: shoal_int8_decode_block(dst + base, codes + base, scale, 64); break;
        case 128: shoal_int8_decode_block(dst + base, codes + base, scale, 128); break;
        default: shoal_int8_decode_block(dst + base, codes + base, scale, n); break;
        }
    }
}

/* s = decode(codes) + local, returning max |s| as bits (as amax_bits). */
SHOAL_INT8_INLINE uint32_t shoal_int8_add_block(float *restrict s, const int8_t *restrict cin,
                                               float scale, const float *restrict local,
                                               size_t n)
{
    uint32_t m = 0;
    SHOAL_INT8_VEC_LOOP
    for (size_t i = 0; i < n; i++) {
        float v = (float)cin[i] * scale + local[i];
        s[i] = v;
        uint32_t a = shoal_int8_bits(v) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* s = decode(codes) + (local + add), returning max |s| as bits. */
SHOAL_INT8_INLINE uint32_t shoal_int8_add3_block(float *restrict s, const int8_t *restrict cin,
                                                float scale, const float *restrict local,
                                                const float *restrict add, size_t n)
{
    uint32_t m = 0;
    SHOAL_INT8_VEC_LOOP
    for (size_t i = 0; i < n; i++) {
        float v = (float)cin[i] * scale + (local[i] + add[i]);
        s[i] = v;
        uint32_t a = shoal_int8_bits(v) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* The block's sum with or without the addend (add NULL). */
SHOAL_INT8_INLINE uint32_t shoal_int8_add_any(float *restrict s, const int8_t *restrict cin,
                                             float scale, const float *restrict local,
                                             const float *restrict add, size_t n)
{
    if (add) {
        switch (n) {
        case 32: return shoal_int8_add3_block(s, cin, scale, local, add, 32);
        case 64: return shoal_int8_add3_block(s, cin, scale, local, add, 64);
        case 128: return shoal_int8_add3_block(s, cin, scale, local, add, 128);
        default: return shoal_int8_add3_block(s, cin, scale, local, add, n);
        }
    }
    switch (n) {
    case 32: return shoal_int8_add_block(s, cin, scale, local, 32);
    case 64: return shoal_int8_add_block(s, cin, scale, local, 64);
    case 128: return shoal_int8_add_block(s, cin, scale, local, 128);
    default: return shoal_int8_add_block(s, cin, scale, local, n);
    }
}

/* One block ahead, as encode, with the sums of two blocks on the stack.
 * Block b of the output is written after blocks b and b + 1 of the input
 * were read into s, and before block b + 2 is: in and out may be the same,
 * and so may add and res. */
SHOAL_INT8_KERNEL static void shoal_int8_add_encode_simd(const shoal_codec_t *c,
                                                         unsigned char *out,
                                                         const unsigned char *in,
                                                         const float *local, const float *add,
                                                         float *res, size_t count, size_t first)
{
    size_t block = c->block, nb = shoal_int8_nblocks(count, block);
    shoal_round_t round = c->round;
    const int8_t *cin = (const int8_t *)(in + nb * SHOAL_INT8_SCALE_BYTES);
    int8_t *cout = (int8_t *)(out + nb * SHOAL_INT8_SCALE_BYTES);
    uint32_t key = shoal_codec_key(c->seed, c->step);
    float s[2][SHOAL_INT8_MAX_BLOCK];
    size_t n = count < block ? count : block;
    shoal_int8_params_t next = shoal_int8_params(
        shoal_int8_value(shoal_int8_add_any(s[0], cin, shoal_int8_scale_get(in, 0), local, add,
                                            n)));
    for (size_t b = 0, base = 0; b < nb; b++, base += block) {
        shoal_int8_params_t p = next;
        size_t len = n;
        if (b + 1 < nb) {
            size_t nbase = base + block;
            n = count - nbase < block ? count - nbase : block;
            next = shoal_int8_params(shoal_int8_value(
                shoal_int8_add_any(s[(b + 1) % 2], cin + nbase, shoal_int8_scale_get(in, b + 1),
                                   local + nbase, add ? add + nbase : NULL, n)));
        }
        shoal_int8_quant_any(out, cout + base, b, s[b % 2], res ? res + base : NULL, len, p,
                             round, key, (uint64_t)first + base);
    }
}

/* ---- ops ---- */

static void shoal_int8_encode(const shoal_codec_t *c, void *wire, const float *src,
                              const float *addend, float *residual, size_t count, size_t first)
{
    if (!shoal_int8_valid(c) || count == 0)
        return;
    if (!shoal_codec_simd_enabled())
        shoal_int8_encode_ref(c, wire, src, addend, residual, count, first);
    else if (addend)
        shoal_int8_encode_add_simd(c, wire, src, addend, residual, count, first);
    else
        shoal_int8_encode_simd(c, wire, src, residual, count, first);
}

static void shoal_int8_decode(const shoal_codec_t *c, float *dst, const void *wire, size_t count,
                              size_t first)
{
    if (!shoal_int8_valid(c) || count == 0)
        return;
    if (shoal_codec_simd_enabled())
        shoal_int8_decode_simd(c, dst, wire, count);
    else
        shoal_int8_decode_ref(c, dst, wire, count);
}

static void shoal_int8_add_encode(const shoal_codec_t *c, void *wire_out, const void *wire_in,
                                  const float *local, const float *addend, float *residual,
                                  size_t count, size_t first)
{
    if (!shoal_int8_valid(c) || count == 0)
        return;
    if (shoal_codec_simd_enabled())
        shoal_int8_add_encode_simd(c, wire_out, wire_in, local, addend, residual, count, first);
    else
        shoal_int8_add_encode_ref(c, wire_out, wire_in, local, addend, residual, count, first);
}

const shoal_codec_ops_t shoal_codec_int8 = {
    .size = sizeof(shoal_codec_ops_t),
    .name = "int8",
    .wire_bytes = shoal_int8_wire_bytes,
    .encode = shoal_int8_encode,
    .decode = shoal_int8_decode,
    .add_encode = shoal_int8_add_encode,
};
