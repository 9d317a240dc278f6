/* The block drivers of the scale-and-payload codecs (blocks.h). */
#include "blocks.h"

/* Whether a block of n values takes the AVX2 kernels (blocks.h). */
static int blocks_simd(size_t n)
{
#ifdef SHOAL_BLOCKS_X86
    return n % 8 == 0 && shoal_codec_simd_enabled() && __builtin_cpu_supports("avx2");
#else
    (void)n;
    return 0;
#endif
}

#ifdef SHOAL_BLOCKS_X86
SHOAL_BLOCKS_AVX2 static void blocks_add_avx2(float *dst, const float *a, const float *b,
                                              size_t n)
{
    for (size_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
}
#endif

/* dst = a + b, each sum rounded to fp32 once (dst may be a). */
static void blocks_add(float *dst, const float *a, const float *b, size_t n)
{
#ifdef SHOAL_BLOCKS_X86
    if (blocks_simd(n)) {
        blocks_add_avx2(dst, a, b, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = a[i] + b[i];
}

static shoal_blocks_block_fn blocks_block(const shoal_blocks_t *k, size_t n)
{
    return k->block_simd && blocks_simd(n) ? k->block_simd : k->block;
}

static shoal_blocks_decode_fn blocks_decode(const shoal_blocks_t *k, size_t n)
{
    return k->decode_simd && blocks_simd(n) ? k->decode_simd : k->decode;
}

static int blocks_valid(const shoal_codec_t *c)
{
    return (c->block == 32 || c->block == 64 || c->block == 128) &&
           (c->round == SHOAL_ROUND_NEAREST || c->round == SHOAL_ROUND_STOCHASTIC);
}

static size_t blocks_of(const shoal_codec_t *c, size_t count)
{
    return (count + c->block - 1) / c->block;
}

size_t shoal_blocks_wire_bytes(const shoal_blocks_t *k, const shoal_codec_t *c, size_t count)
{
    if (!blocks_valid(c))
        return 0;
    return blocks_of(c, count) * sizeof(float) + (count * k->bits + 7) / 8;
}

void shoal_blocks_encode(const shoal_blocks_t *k, const shoal_codec_t *c, void *wire,
                         const float *src, const float *addend, float *residual, size_t count,
                         size_t first)
{
    if (!blocks_valid(c))
        return;
    size_t nblocks = blocks_of(c, count);
    unsigned char *scales = wire, *payload = scales + nblocks * sizeof(float);
    uint32_t key = shoal_codec_key(c->seed, c->step);
    float x[SHOAL_BLOCKS_MAX];
    for (size_t b = 0; b < nblocks; b++) {
        size_t at = b * c->block, n = count - at < c->block ? count - at : c->block;
        const float *xb = src + at;
        if (addend) {
            blocks_add(x, src + at, addend + at, n);
            xb = x;
        }
        blocks_block(k, n)(c, key, xb, n, first + at, scales + b * sizeof(float),
                 payload + at * k->bits / 8, residual ? residual + at : NULL);
    }
}

void shoal_blocks_decode(const shoal_blocks_t *k, const shoal_codec_t *c, float *dst,
                         const void *wire, size_t count)
{
    if (!blocks_valid(c))
        return;
    size_t nblocks = blocks_of(c, count);
    const unsigned char *scales = wire, *payload = scales + nblocks * sizeof(float);
    for (size_t b = 0; b < nblocks; b++) {
        size_t at = b * c->block, n = count - at < c->block ? count - at : c->block;
        blocks_decode(k, n)(dst + at, scales + b * sizeof(float), payload + at * k->bits / 8, n);
    }
}

void shoal_blocks_add_encode(const shoal_blocks_t *k, const shoal_codec_t *c, void *wire_out,
                             const void *wire_in, const float *local, const float *addend,
                             float *residual, size_t count, size_t first)
{
    if (!blocks_valid(c))
        return;
    size_t nblocks = blocks_of(c, count), payload_at = nblocks * sizeof(float);
    const unsigned char *in = wire_in;
    unsigned char *out = wire_out;
    uint32_t key = shoal_codec_key(c->seed, c->step);
    float s[SHOAL_BLOCKS_MAX];
    for (size_t b = 0; b < nblocks; b++) {
        size_t at = b * c->block, n = count - at < c->block ? count - at : c->block;
        size_t pat = payload_at + at * k->bits / 8;
        blocks_decode(k, n)(s, in + b * sizeof(float), in + pat, n);
        if (addend) {
            float t[SHOAL_BLOCKS_MAX];
            blocks_add(t, local + at, addend + at, n);
            blocks_add(s, s, t, n);
        } else {
            blocks_add(s, s, local + at, n);
        }
        blocks_block(k, n)(c, key, s, n, first + at, out + b * sizeof(float), out + pat,
                 residual ? residual + at : NULL);
    }
}
