/* Block codecs for compressed reductions of fp32 data.
 *
 * A codec turns runs of fp32 values into a wire form and back, one block of
 * c->block values (32, 64 or 128) at a time; the last block of a run may be
 * short. Every operation takes `first`, the index of the run's first value
 * in the whole tensor, so that a run cut into pipeline pieces (each a whole
 * number of blocks, except the tensor's end) encodes exactly as the whole
 * would: the random stream of stochastic rounding and the shared scales of
 * a codec are indexed by it.
 *
 * The three operations are what a pipeline stage needs (algos/prims.h):
 * - encode: the first hop of a reduction sends its own contribution;
 * - add_encode: a middle hop combines what came in with its own
 *   contribution and sends the result on, compressed again (int8: decode,
 *   add in fp32, requantise, fused; ternary: integer add of the codes);
 * - decode: the gather phase forwards the wire bytes unchanged and every
 *   rank, the owner included, takes the decoded value, so all ranks end
 *   with the same bits.
 *
 * Error feedback: residual (when not NULL) receives, per value, what this
 * call's quantisation lost: src - decode(wire) for encode,
 * (decode(wire_in) + local) - decode(wire_out) for add_encode (in exact
 * arithmetic; each codec says how it rounds). Summed over the ranks of a
 * reduction these are the reduction's total error, up to fp32 rounding, and
 * adding them to the next step's input is error feedback.
 *
 * That addition is fused: addend (when not NULL) is the last step's
 * residual, added value by value in the same pass, so that the value
 * encoded is x = src[i] + addend[i] (local[i] + addend[i] for add_encode),
 * that sum rounded to fp32 once (the bits of a caller adding the two
 * arrays first), and the residual written is x - decode(wire) (resp.
 * (decode(wire_in) + x) - decode(wire_out)). residual may be addend: each
 * value's addend is read before its residual is written. No pass over the
 * tensor precedes the wire.
 *
 * A codec whose block is not 32, 64 or 128, or whose round is not a
 * shoal_round_t, is invalid: wire_bytes gives 0 and the operations touch
 * nothing. The caller checks wire_bytes once when it sets a codec up.
 *
 * Each codec has a scalar reference and kernels built for AVX2 (and
 * AVX-512 where that pays), picked at load time; results are bitwise
 * identical whichever runs (tests compare them). */
#ifndef SHOAL_CODEC_H
#define SHOAL_CODEC_H

#include "base/dtype.h" /* SHOAL_HD: the inline math below also runs on the device */

#include <stddef.h>
#include <stdint.h>

typedef struct shoal_codec shoal_codec_t;

typedef struct {
    size_t size;      /* sizeof(shoal_codec_ops_t) */
    const char *name; /* "int8", "ternary", "sign" */
    /* Bytes of the wire form of count values. */
    size_t (*wire_bytes)(const shoal_codec_t *c, size_t count);
    void (*encode)(const shoal_codec_t *c, void *wire, const float *src, const float *addend,
                   float *residual, size_t count, size_t first);
    void (*decode)(const shoal_codec_t *c, float *dst, const void *wire, size_t count,
                   size_t first);
    /* wire_out = wire_in (+) (local + addend). wire_out may equal wire_in. */
    void (*add_encode)(const shoal_codec_t *c, void *wire_out, const void *wire_in,
                       const float *local, const float *addend, float *residual, size_t count,
                       size_t first);
} shoal_codec_ops_t;

typedef enum {
    SHOAL_ROUND_NEAREST = 0, /* deterministic, biased (int8: ties to even) */
    SHOAL_ROUND_STOCHASTIC,  /* up with probability equal to the fraction */
} shoal_round_t;

struct shoal_codec {
    const shoal_codec_ops_t *ops;
    size_t block;        /* values per block: 32, 64 or 128 */
    shoal_round_t round;
    /* Stochastic rounding draws value i's number from (seed, step, i): the
     * same on every run and rank that asks for the same. Ranks that must
     * round independently use different seeds. */
    uint64_t seed;
    uint64_t step;
    /* Shared-scale codecs (ternary): one scale per block of the whole
     * tensor (block index = (first + i) / block), the same on every rank. */
    const float *scales;
    /* Shared-scale codecs: wire values of 2 bytes instead of 1, for sums of
     * more than 127 ranks. */
    int wide;
    /* Shared-scale codecs: wire values of 4 bits, two to a byte (value 2j
     * in the low half of byte j), for sums within +-7: up to 7 ranks, each
     * adding at most one to a value's magnitude. Not with wide. */
    int packed;
};

extern const shoal_codec_ops_t shoal_codec_int8;
extern const shoal_codec_ops_t shoal_codec_ternary;
/* 1 bit a value and a scale a block (compress/sign.c); one scalar path,
 * not yet a compressor kind. */
extern const shoal_codec_ops_t shoal_codec_sign;
/* 4-bit integers with a scale a block (compress/int4.c); one scalar path. */
extern const shoal_codec_ops_t shoal_codec_int4;

/* Shared scales of the ternary codec (compress/ternary.c). out[b] = the
 * largest |src[i]| of block b, i in [b * block, (b + 1) * block), for the
 * ceil(count / block) blocks of src (NaN ignored; 0 for a block without
 * numbers): what each rank contributes to the max all-reduce that gives
 * c->scales. */
void shoal_codec_block_absmax(float *out, const float *src, size_t count, size_t block);
/* Optional clipping: k population standard deviations of src[0..count),
 * or 0, which means no clipping (k <= 0, count 0, constant or non-finite
 * input). A rank that clips replaces each out[b] of block_absmax by
 * min(out[b], bound) before the all-reduce, so that a scale is the block's
 * maximum of the clipped values; values beyond their scale then encode as
 * +-scale and the rest goes to the residual. */
float shoal_codec_clip_bound(const float *src, size_t count, float k);
/* The same two of src + add (add NULL: src alone), each value the fp32 sum
 * src[i] + add[i], without writing the sums: error feedback's scales and
 * bound, read from the input and the residual in one pass each. */
void shoal_codec_block_absmax_sum(float *out, const float *src, const float *add,
                                  size_t count, size_t block);
float shoal_codec_clip_bound_sum(const float *src, const float *add, size_t count, float k);

/* a * b and a / b, each rounded to fp32 on its own. The host compilers
 * never fuse a product written in a function of its own into the caller's
 * addition (gcc in ISO C mode contracts nothing, clang at most within one
 * expression, and the codecs turn contraction off besides), but nvcc
 * fuses a product into a following addition by default, rounding once
 * where the host rounds twice: the device asks for the separately rounded
 * operations by name, so that the codecs' element math
 * (compress/int8_elem.h, compress/ternary_elem.h) gives the same bits on
 * both. */
static inline SHOAL_HD float shoal_codec_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/* a * b in double, rounded on its own (the same reason). */
static inline SHOAL_HD double shoal_codec_dmul(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

static inline SHOAL_HD float shoal_codec_div(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

/* The key of stream (seed, step), computed once per call. */
static inline SHOAL_HD uint32_t shoal_codec_key(uint64_t seed, uint64_t step)
{
    uint64_t x = seed ^ (step + 1) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return (uint32_t)(x ^ x >> 32);
}

/* The uniform number in [0, 1) of value `index` of the stream with key:
 * a counter-based hash in 32-bit arithmetic (it vectorises with AVX2), so
 * any value's number is found without the others. */
static inline SHOAL_HD float shoal_codec_uniform(uint32_t key, uint64_t index)
{
    uint32_t x = (uint32_t)index ^ key;
    x += (uint32_t)(index >> 32) * 0x9e3779b9u;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return shoal_codec_mul((float)(x >> 8), 1.0f / 16777216.0f);
}

/* Allow (1, the default) or forbid (0) the SIMD kernels: forbidden, every
 * codec runs its scalar reference path, which lets tests compare the two.
 * Thread-safe; affects calls made afterwards. */
void shoal_codec_simd_enable(int enable);
int shoal_codec_simd_enabled(void);

#endif
