/* The block drivers of the codecs whose wire is one fp32 scale per block,
 * then every block's payload of a whole number of bits per value (sign: 1,
 * int4: 4): compress/sign.c and compress/int4.c.
 *
 * Wire of a run of count values, nblocks = ceil(count / block): nblocks
 * scales in the host's byte order, then ceil(count * bits / 8) bytes of
 * payload; block b's payload starts at byte b * block * bits / 8 of it (a
 * whole byte: block is 32, 64 or 128). A codec supplies what one block
 * does; the drivers walk the run (codec.h's operations):
 * - encode: each block of src (+ addend, each sum rounded once, on the
 *   stack) through the kernel, its residual written after its addend was
 *   read (residual may be addend);
 * - decode: each block through the decoder;
 * - add_encode: s = decode(wire_in's block) + (local + addend) on the
 *   stack, then the kernel on s; a block of wire_in is read whole before
 *   the same block of wire_out is written (wire_out may be wire_in).
 * A codec whose block is not 32, 64 or 128 or whose round is not a
 * shoal_round_t is invalid: wire_bytes gives 0, the drivers touch nothing. */
#ifndef SHOAL_COMPRESS_BLOCKS_H
#define SHOAL_COMPRESS_BLOCKS_H

#include "codec.h"

#define SHOAL_BLOCKS_MAX 128

typedef void (*shoal_blocks_block_fn)(const shoal_codec_t *c, uint32_t key, const float *x,
                                      size_t n, size_t first, unsigned char *scale,
                                      unsigned char *payload, float *residual);
typedef void (*shoal_blocks_decode_fn)(float *dst, const unsigned char *scale,
                                       const unsigned char *payload, size_t n);

typedef struct {
    unsigned bits; /* payload bits a value */
    /* Block x of n values (index first in the tensor, stream key key) into
     * scale (4 bytes) and payload; x - decode into residual (not NULL). */
    shoal_blocks_block_fn block;
    shoal_blocks_decode_fn decode;
    /* The same with the scalar path's bits, built for AVX2 (NULL: none);
     * the drivers take them for blocks of a whole number of 8-lane
     * vectors, when SIMD is enabled (codec.h) and the CPU has AVX2. */
    shoal_blocks_block_fn block_simd;
    shoal_blocks_decode_fn decode_simd;
} shoal_blocks_t;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define SHOAL_BLOCKS_X86 1
#define SHOAL_BLOCKS_AVX2 __attribute__((target("avx2")))

/* shoal_codec_uniform of indices idx .. idx + 7, whose low words do not
 * wrap (the caller takes the other case one value at a time). */
SHOAL_BLOCKS_AVX2 static inline __m256 shoal_blocks_uniform8(uint32_t key, uint64_t idx)
{
    __m256i x = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)idx),
                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    x = _mm256_xor_si256(x, _mm256_set1_epi32((int)key));
    x = _mm256_add_epi32(x, _mm256_set1_epi32((int)((uint32_t)(idx >> 32) * 0x9e3779b9u)));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bu));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(x, 8)),
                         _mm256_set1_ps(1.0f / 16777216.0f));
}
#endif

size_t shoal_blocks_wire_bytes(const shoal_blocks_t *k, const shoal_codec_t *c, size_t count);
void shoal_blocks_encode(const shoal_blocks_t *k, const shoal_codec_t *c, void *wire,
                         const float *src, const float *addend, float *residual, size_t count,
                         size_t first);
void shoal_blocks_decode(const shoal_blocks_t *k, const shoal_codec_t *c, float *dst,
                         const void *wire, size_t count);
void shoal_blocks_add_encode(const shoal_blocks_t *k, const shoal_codec_t *c, void *wire_out,
                             const void *wire_in, const float *local, const float *addend,
                             float *residual, size_t count, size_t first);

#endif
