/* 1-bit sign quantisation: shoal_codec_sign (codec.h), the wire of 1-bit
 * Adam's compressed all-reduce and of signSGD with error feedback.
 *
 * Wire form of a run of count values, nblocks = ceil(count / block):
 *   nblocks fp32 scales, in the host's byte order, then ceil(count / 8)
 *   bytes of signs: value i's bit is bit i % 8 of byte i / 8 (1: negative).
 *   A block starts on a byte (block is 32, 64 or 128), so block b's bits
 *   start at wire + nblocks * 4 + b * block / 8. Only the run's last block
 *   may be short; its last byte's unused bits are 0. wire_bytes =
 *   nblocks * 4 + ceil(count / 8): 1/32 of fp32 plus a scale per block.
 *
 * Nearest (deterministic, biased): a block's scale is the mean of |x| over
 * its values (summed in double in index order, divided by the block's
 * count, rounded to fp32 once), the scale that makes scale * sign(x)
 * closest to the block in the 2-norm; a value's bit is 1 where x < 0 (so
 * -0 encodes as +0). Decode: +scale or -scale. What this loses, which is
 * large (every value comes back with the block's mean magnitude), is what
 * error feedback carries to the next step: 1-bit Adam and EF-signSGD
 * converge only with it.
 *
 * Stochastic (unbiased): the scale is max |x| over the block; a value is
 * negative with probability (1 - x / scale) / 2, drawn with
 * u = shoal_codec_uniform(shoal_codec_key(seed, step), first + i): bit 1
 * where u < 0.5 - 0.5 * (x * inv), inv = 1 / scale in fp32. The mean of
 * decode over the stream is x, up to the fp32 roundings of inv and the
 * product and the 2^-24 resolution of u.
 *
 * A block holding a NaN or an infinity has scale NaN: each of its values
 * decodes to NaN, and so does each residual, so a non-finite value never
 * comes back finite (as in the int8 codec). An all-zero block has scale 0
 * and decodes to +0 (nearest) or +0 and -0 (stochastic draws a sign even
 * for 0; the residual is then 0 either way).
 *
 * encode's residual is x - decode(wire); add_encode forms
 * s = decode(wire_in) + (local + addend) a block at a time on the stack
 * (each sum rounded to fp32 once), encodes s and writes the residual
 * s - decode(wire_out); a block of wire_in is read whole before the same
 * block of wire_out is written, so wire_out may equal wire_in. With an
 * addend, x = src + addend rounded once: the same bits as a caller adding
 * the arrays first. A block's addend is read before its residual is
 * written, so residual may be addend.
 *
 * One path, this scalar code, serves every machine: a block's sum is
 * taken in index order, which gives the same scale on every rank and
 * every build (the compiler vectorises nothing that would reorder it). A
 * codec whose block is not 32, 64 or 128 or whose round is not a
 * shoal_round_t is invalid: wire_bytes gives 0 and the operations touch
 * nothing. */
#include "codec.h"

#include <math.h>
#include <string.h>

#define SIGN_MAX_BLOCK 128

static int sign_valid(const shoal_codec_t *c)
{
    return (c->block == 32 || c->block == 64 || c->block == 128) &&
           (c->round == SHOAL_ROUND_NEAREST || c->round == SHOAL_ROUND_STOCHASTIC);
}

static size_t sign_wire_bytes(const shoal_codec_t *c, size_t count)
{
    if (!sign_valid(c))
        return 0;
    size_t nblocks = (count + c->block - 1) / c->block;
    return nblocks * sizeof(float) + (count + 7) / 8;
}

/* The scale of the n values of x (see the top). */
static float sign_scale(const shoal_codec_t *c, const float *x, size_t n)
{
    double sum = 0;
    float amax = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!isfinite(a))
            return NAN;
        sum += a;
        if (a > amax)
            amax = a;
    }
    return c->round == SHOAL_ROUND_STOCHASTIC ? amax : (float)(sum / (double)n);
}

/* Encode the n values of block x (index first in the tensor) into scale_p
 * and bits; write x - decode into residual when it is not NULL. */
static void sign_block(const shoal_codec_t *c, uint32_t key, const float *x, size_t n,
                       size_t first, unsigned char *scale_p, unsigned char *bits,
                       float *residual)
{
    float scale = sign_scale(c, x, n);
    memcpy(scale_p, &scale, sizeof(scale));
    memset(bits, 0, (n + 7) / 8);
    float inv = scale > 0 ? shoal_codec_div(1.0f, scale) : 0.0f;
    for (size_t i = 0; i < n; i++) {
        int neg;
        if (c->round == SHOAL_ROUND_STOCHASTIC)
            neg = shoal_codec_uniform(key, first + i) <
                  0.5f - shoal_codec_mul(0.5f, shoal_codec_mul(x[i], inv));
        else
            neg = x[i] < 0;
        bits[i / 8] |= (unsigned char)(neg << (i % 8));
        if (residual)
            residual[i] = x[i] - (neg ? -scale : scale);
    }
}

static void sign_decode_block(float *dst, const unsigned char *scale_p,
                              const unsigned char *bits, size_t n)
{
    float scale;
    memcpy(&scale, scale_p, sizeof(scale));
    for (size_t i = 0; i < n; i++)
        dst[i] = bits[i / 8] >> (i % 8) & 1 ? -scale : scale;
}

static void sign_encode(const shoal_codec_t *c, void *wire, const float *src,
                        const float *addend, float *residual, size_t count, size_t first)
{
    if (!sign_valid(c))
        return;
    size_t nblocks = (count + c->block - 1) / c->block;
    unsigned char *scales = wire, *bits = scales + nblocks * sizeof(float);
    uint32_t key = shoal_codec_key(c->seed, c->step);
    float x[SIGN_MAX_BLOCK];
    for (size_t b = 0; b < nblocks; b++) {
        size_t at = b * c->block, n = count - at < c->block ? count - at : c->block;
        for (size_t i = 0; i < n; i++)
            x[i] = addend ? src[at + i] + addend[at + i] : src[at + i];
        sign_block(c, key, x, n, first + at, scales + b * sizeof(float), bits + at / 8,
                   residual ? residual + at : NULL);
    }
}

static void sign_decode(const shoal_codec_t *c, float *dst, const void *wire, size_t count,
                        size_t first)
{
    (void)first;
    if (!sign_valid(c))
        return;
    size_t nblocks = (count + c->block - 1) / c->block;
    const unsigned char *scales = wire, *bits = scales + nblocks * sizeof(float);
    for (size_t b = 0; b < nblocks; b++) {
        size_t at = b * c->block, n = count - at < c->block ? count - at : c->block;
        sign_decode_block(dst + at, scales + b * sizeof(float), bits + at / 8, n);
    }
}

static void sign_add_encode(const shoal_codec_t *c, void *wire_out, const void *wire_in,
                            const float *local, const float *addend, float *residual,
                            size_t count, size_t first)
{
    if (!sign_valid(c))
        return;
    size_t nblocks = (count + c->block - 1) / c->block;
    size_t bits_at = nblocks * sizeof(float);
    const unsigned char *in = wire_in;
    unsigned char *out = wire_out;
    uint32_t key = shoal_codec_key(c->seed, c->step);
    float s[SIGN_MAX_BLOCK];
    for (size_t b = 0; b < nblocks; b++) {
        size_t at = b * c->block, n = count - at < c->block ? count - at : c->block;
        sign_decode_block(s, in + b * sizeof(float), in + bits_at + at / 8, n);
        for (size_t i = 0; i < n; i++)
            s[i] += addend ? local[at + i] + addend[at + i] : local[at + i];
        sign_block(c, key, s, n, first + at, out + b * sizeof(float), out + bits_at + at / 8,
                   residual ? residual + at : NULL);
    }
}

const shoal_codec_ops_t shoal_codec_sign = {
    .size = sizeof(shoal_codec_ops_t),
    .name = "sign",
    .wire_bytes = sign_wire_bytes,
    .encode = sign_encode,
    .decode = sign_decode,
    .add_encode = sign_add_encode,
};
