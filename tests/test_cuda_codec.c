/* The CUDA module's codec entry (dev_ops.h) against the host codecs
 * (compress/codec.h): int8 and ternary encode, add_encode and decode run
 * on the device and through c->ops on the same inputs, and the wire,
 * decoded values and residuals must agree bit for bit, over every block
 * length and rounding, with and without an addend and a residual
 * (residual == addend too), in place and not, for counts that do and do
 * not fill their last block, at offsets `first` that are not multiples of
 * the block (for int8 also one whose indices cross 2^32), and with NaN,
 * infinities, subnormals, tiny blocks and values near FLT_MAX in the
 * input; the blocks' largest magnitudes (ABSMAX) against
 * shoal_codec_block_absmax_sum; and the blocks' moments (MOMENTS) against
 * sums written out here. In make test the driver is the CPU stand-in of
 * tests/cuda/, whose kernel runs the very range function of cuda/kern.h;
 * make test-gpu runs this binary on the real driver. */
#include "cuda_user.h"
#include "harness.h"

#include "base/dev.h"
#include "compress/codec.h"
#include "cuda/kern.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_COUNT 4099
#define NCOUNTS 5
static const size_t counts[NCOUNTS] = {0, 1, 31, 1000, MAX_COUNT};
static const size_t blocks[3] = {32, 64, 128};

/* Error feedback's shapes: what addend and residual are. */
enum {
    FB_NONE,      /* neither */
    FB_RESIDUAL,  /* a residual only */
    FB_ADDEND,    /* an addend only */
    FB_BOTH,      /* both, separate */
    FB_SAME,      /* residual == addend */
    FB_COUNT,
};

static const shoal_dev_ops_t *ops;
static unsigned long launches; /* codec launches this test expects */

static void open_module(void)
{
    char why[256];
    if (cu_user_open(0, why, sizeof(why)) != 0)
        fail_msg("%s", why);
    ops = shoal_dev_get();
    if (!ops)
        fail_msg("%s", shoal_dev_why());
}

static uint32_t rng;

static uint32_t rnd(void)
{
    rng = harness_mix(rng + 0x9e3779b9u);
    return rng;
}

/* A number in [-1, 1). */
static float rnd_signed(void)
{
    return (float)(int32_t)rnd() * 0x1p-31f;
}

/* Values in groups of 32 (a block of any length holds whole groups), each
 * group of its own magnitude: ordinary, small, near FLT_MAX, below
 * 2^-100 (int8's rescaled blocks), subnormal, all zeros, large. With
 * specials when asked: a NaN, a -NaN, +inf and -inf in some groups
 * (spoiling their blocks), and -0 here and there. */
static void fill(float *x, size_t n, float scale, int specials)
{
    static const float mags[8] = {1.0f, 1e-3f, 3e38f, 0x1p-110f, 0x1p-140f, 0.0f, 1e10f, 7.0f};
    for (size_t i = 0; i < n; i++) {
        size_t g = i / 32;
        x[i] = mags[g % 8] * (scale * rnd_signed());
        if (g % 8 == 2 && i % 32 == 5)
            x[i] = i % 64 < 32 ? FLT_MAX : -FLT_MAX;
        if (rnd() % 61 == 0)
            x[i] = -0.0f;
    }
    if (!specials)
        return;
    for (size_t g = 0; g * 32 < n; g++) {
        size_t i = g * 32 + (g * 7) % 32;
        if (i >= n)
            break;
        if (g % 13 == 4)
            x[i] = NAN;
        else if (g % 13 == 6)
            x[i] = -NAN;
        else if (g % 17 == 9)
            x[i] = INFINITY;
        else if (g % 19 == 2)
            x[i] = -INFINITY;
    }
}

/* Equal bits, or (on a real GPU only) NaN on both sides: the GPU's
 * arithmetic gives its own canonical NaN where the host propagates an
 * operand's sign and payload, and the codecs promise NaN, not which. The
 * stand-in runs the host's instructions and is held to the bits. */
static void check_floats(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) == 0)
            continue;
        if (!cu_user_is_standin() && isnan(got[i]) && isnan(want[i]))
            continue;
        fail_msg("%s: value %zu is %a, the host's is %a", what, i, (double)got[i],
                 (double)want[i]);
    }
}

static void check_bytes(const void *got, const void *want, size_t n, const char *what)
{
    const unsigned char *g = got, *w = want;
    for (size_t i = 0; i < n; i++)
        if (g[i] != w[i])
            fail_msg("%s: byte %zu of %zu is %#x, the host's is %#x", what, i, n, g[i], w[i]);
}

/* The device entry's arguments for codec c: its kind by name, as a caller
 * outside the module tells it. */
static shoal_dev_codec_args_t dev_args(const shoal_codec_t *c, shoal_dev_codec_op_t op,
                                       const float *dev_scales, size_t count, size_t first)
{
    shoal_dev_codec_args_t a;
    memset(&a, 0, sizeof(a));
    a.op = op;
    a.kind = strcmp(c->ops->name, "int8") == 0 ? SHOAL_DEV_CODEC_INT8 : SHOAL_DEV_CODEC_TERNARY;
    a.block = c->block;
    a.round = (int)c->round;
    a.seed = c->seed;
    a.step = c->step;
    a.scales = dev_scales;
    a.wide = c->wide;
    a.packed = c->packed;
    a.count = count;
    a.first = first;
    return a;
}

/* Host buffers, their device twins and the stream of one test. */
typedef struct {
    float src[MAX_COUNT], src2[MAX_COUNT], add[MAX_COUNT], res[MAX_COUNT], dst[MAX_COUNT];
    float got[MAX_COUNT];
    unsigned char wire_in[4 * MAX_COUNT], wire[4 * MAX_COUNT], got_wire[4 * MAX_COUNT];
    void *d_src, *d_add, *d_res, *d_dst, *d_wire_in, *d_wire;
    void *stream;
} bufs_t;

static bufs_t *bufs_new(void)
{
    bufs_t *b = calloc(1, sizeof(*b));
    assert_non_null(b);
    size_t fbytes = MAX_COUNT * sizeof(float), wbytes = 4 * MAX_COUNT;
    b->d_src = cu_user_alloc(fbytes);
    b->d_add = cu_user_alloc(fbytes);
    b->d_res = cu_user_alloc(fbytes);
    b->d_dst = cu_user_alloc(fbytes);
    b->d_wire_in = cu_user_alloc(wbytes);
    b->d_wire = cu_user_alloc(wbytes);
    assert_int_equal(ops->stream_create(0, &b->stream), SHOAL_OK);
    return b;
}

static void bufs_free(bufs_t *b)
{
    assert_int_equal(ops->stream_destroy(b->stream), SHOAL_OK);
    cu_user_free(b->d_src);
    cu_user_free(b->d_add);
    cu_user_free(b->d_res);
    cu_user_free(b->d_dst);
    cu_user_free(b->d_wire_in);
    cu_user_free(b->d_wire);
    free(b);
}

/* Run a on the device and wait for it, counting the launch. */
static void dev_run(bufs_t *b, const shoal_dev_codec_args_t *a)
{
    if (ops->codec(a, b->stream) != SHOAL_OK)
        fail_msg("codec entry: %s", ops->why());
    assert_int_equal(ops->stream_sync(b->stream), SHOAL_OK);
    if (a->count > 0)
        launches++;
}

/* One configuration of codec c: encode src, add_encode src2 into the
 * wire_in the caller prepared, decode the result, each on host and
 * device, comparing every output. fb is the error feedback's shape;
 * in_place runs add_encode with wire_out == wire_in. */
static void run_case(bufs_t *b, const shoal_codec_t *c, const float *dev_scales, size_t count,
                     size_t first, int fb, int in_place, const char *name)
{
    char what[160];
    size_t wbytes = c->ops->wire_bytes(c, count), fbytes = count * sizeof(float);
    assert_true(count == 0 || wbytes > 0);
    assert_true(wbytes <= sizeof(b->wire));
    int has_add = fb == FB_ADDEND || fb == FB_BOTH || fb == FB_SAME;
    int has_res = fb == FB_RESIDUAL || fb == FB_BOTH || fb == FB_SAME;
    float *h_add = has_add ? b->add : NULL, *h_res = has_res ? b->res : NULL;
    void *d_add = has_add ? b->d_add : NULL, *d_res = has_res ? b->d_res : NULL;
    if (fb == FB_SAME) {
        h_res = h_add;
        d_res = d_add;
    }
    static float addend[MAX_COUNT];
    fill(addend, count, 1e-2f, 0);

    /* encode */
    memcpy(b->add, addend, fbytes);
    memset(b->res, 0x5a, fbytes);
    cu_user_htod(b->d_src, b->src, fbytes);
    cu_user_htod(b->d_add, b->add, fbytes);
    cu_user_htod(b->d_res, b->res, fbytes);
    memset(b->wire, 0xee, wbytes);
    cu_user_htod(b->d_wire, b->wire, wbytes);
    c->ops->encode(c, b->wire, b->src, h_add, h_res, count, first);
    shoal_dev_codec_args_t a = dev_args(c, SHOAL_DEV_CODEC_ENCODE, dev_scales, count, first);
    a.wire_out = b->d_wire;
    a.src = b->d_src;
    a.addend = d_add;
    a.residual = d_res;
    dev_run(b, &a);
    cu_user_dtoh(b->got_wire, b->d_wire, wbytes);
    snprintf(what, sizeof(what), "%s encode (fb %d) wire", name, fb);
    check_bytes(b->got_wire, b->wire, wbytes, what);
    if (has_res) {
        cu_user_dtoh(b->got, d_res, fbytes);
        snprintf(what, sizeof(what), "%s encode (fb %d) residual", name, fb);
        check_floats(b->got, h_res, count, what);
    }

    /* add_encode of src2 onto wire_in */
    memcpy(b->add, addend, fbytes);
    memset(b->res, 0x5a, fbytes);
    cu_user_htod(b->d_src, b->src2, fbytes);
    cu_user_htod(b->d_add, b->add, fbytes);
    cu_user_htod(b->d_res, b->res, fbytes);
    cu_user_htod(b->d_wire_in, b->wire_in, wbytes);
    memset(b->wire, 0xee, wbytes);
    cu_user_htod(b->d_wire, b->wire, wbytes);
    unsigned char *h_out = b->wire;
    void *d_out = b->d_wire;
    if (in_place) {
        memcpy(b->wire, b->wire_in, wbytes);
        d_out = b->d_wire_in;
    }
    c->ops->add_encode(c, h_out, in_place ? h_out : b->wire_in, b->src2, h_add, h_res, count,
                       first);
    a = dev_args(c, SHOAL_DEV_CODEC_ADD_ENCODE, dev_scales, count, first);
    a.wire_out = d_out;
    a.wire_in = b->d_wire_in;
    a.src = b->d_src;
    a.addend = d_add;
    a.residual = d_res;
    dev_run(b, &a);
    cu_user_dtoh(b->got_wire, d_out, wbytes);
    snprintf(what, sizeof(what), "%s add_encode (fb %d, in place %d) wire", name, fb, in_place);
    check_bytes(b->got_wire, h_out, wbytes, what);
    if (has_res) {
        cu_user_dtoh(b->got, d_res, fbytes);
        snprintf(what, sizeof(what), "%s add_encode (fb %d) residual", name, fb);
        check_floats(b->got, h_res, count, what);
    }

    /* decode of add_encode's wire (the host's, which the device's equals) */
    cu_user_htod(b->d_wire_in, h_out, wbytes);
    memset(b->dst, 0x5a, fbytes);
    cu_user_htod(b->d_dst, b->dst, fbytes);
    c->ops->decode(c, b->dst, h_out, count, first);
    a = dev_args(c, SHOAL_DEV_CODEC_DECODE, dev_scales, count, first);
    a.wire_in = b->d_wire_in;
    a.dst = b->d_dst;
    dev_run(b, &a);
    cu_user_dtoh(b->got, b->d_dst, fbytes);
    snprintf(what, sizeof(what), "%s decode", name);
    check_floats(b->got, b->dst, count, what);
}

static void test_int8(void **state)
{
    (void)state;
    open_module();
    bufs_t *b = bufs_new();
    unsigned long before = cu_user_launches(SHOAL_K_CODEC);
    launches = 0;
    rng = 1;
    /* The last offset's indices cross 2^32, where the random stream's
     * high word changes. */
    const size_t firsts[3] = {0, 4097, (size_t)(UINT64_C(1) << 32) - 1500};
    int n = 0;
    for (int bi = 0; bi < 3; bi++)
        for (int round = SHOAL_ROUND_NEAREST; round <= SHOAL_ROUND_STOCHASTIC; round++)
            for (int ci = 0; ci < NCOUNTS; ci++)
                for (int fi = 0; fi < 3; fi++)
                    for (int fb = 0; fb < FB_COUNT; fb++, n++) {
                        size_t count = counts[ci];
                        shoal_codec_t c = {
                            .ops = &shoal_codec_int8,
                            .block = blocks[bi],
                            .round = (shoal_round_t)round,
                            .seed = 11 + (uint64_t)n,
                            .step = 5,
                        };
                        char name[96];
                        snprintf(name, sizeof(name), "int8 block %zu round %d count %zu first %zu",
                                 c.block, round, count, firsts[fi]);
                        fill(b->src, count, 1.0f, 1);
                        fill(b->src2, count, 0.5f, 1);
                        /* add_encode's incoming wire: another rank's encode. */
                        static float other[MAX_COUNT];
                        fill(other, count, 2.0f, 1);
                        c.ops->encode(&c, b->wire_in, other, NULL, NULL, count, firsts[fi]);
                        /* Both host paths, the SIMD kernels and the reference
                         * (they agree, as the codec's own tests check). */
                        shoal_codec_simd_enable(n % 2);
                        run_case(b, &c, NULL, count, firsts[fi], fb, fb >= FB_BOTH, name);
                    }
    shoal_codec_simd_enable(1);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_CODEC) - before, launches);
    bufs_free(b);
}

/* Scales of the tensor's blocks up to the run's end from the run's own
 * values (the max all-reduce of one rank), some halved so that values
 * beyond their scale are clipped, and some blocks left 0. */
static float *ternary_scales(const float *src, size_t count, size_t first, size_t block,
                             size_t *nscales_p)
{
    size_t n = (first + count) / block + 1;
    float *tensor = calloc(first + count + 1, sizeof(float)), *scales = calloc(n, sizeof(float));
    assert_non_null(tensor);
    assert_non_null(scales);
    memcpy(tensor + first, src, count * sizeof(float));
    shoal_codec_block_absmax(scales, tensor, first + count, block);
    for (size_t s = 0; s < n; s++)
        if (s % 3 == 1)
            scales[s] *= 0.5f;
    free(tensor);
    *nscales_p = n;
    return scales;
}

/* Every byte of a wire in its form's range: sums that saturate at the
 * wire's bound, as add_encode must. */
static void random_wire(unsigned char *w, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        w[i] = (unsigned char)rnd();
}

static void test_ternary(void **state)
{
    (void)state;
    open_module();
    bufs_t *b = bufs_new();
    unsigned long before = cu_user_launches(SHOAL_K_CODEC);
    launches = 0;
    rng = 2;
    const size_t firsts[2] = {0, 100003};
    /* 0: one byte a value, 1: wide, 2: packed */
    int n = 0;
    for (int form = 0; form < 3; form++)
        for (int bi = 0; bi < 3; bi++)
            for (int round = SHOAL_ROUND_NEAREST; round <= SHOAL_ROUND_STOCHASTIC; round++)
                for (int ci = 0; ci < NCOUNTS; ci++)
                    for (int fi = 0; fi < 2; fi++)
                        for (int fb = 0; fb < FB_COUNT; fb++, n++) {
                            size_t count = counts[ci], first = firsts[fi], nscales;
                            /* Scales must be finite: the infinities go in after. */
                            fill(b->src, count, 1.0f, 0);
                            float *scales =
                                ternary_scales(b->src, count, first, blocks[bi], &nscales);
                            for (size_t i = 17; i < count; i += 401)
                                b->src[i] = i % 2 ? INFINITY : -INFINITY;
                            for (size_t i = 5; i < count; i += 203)
                                b->src[i] = i % 2 ? NAN : -NAN;
                            fill(b->src2, count, 1.0f, 0);
                            void *d_scales = cu_user_alloc(nscales * sizeof(float));
                            cu_user_htod(d_scales, scales, nscales * sizeof(float));
                            shoal_codec_t c = {
                                .ops = &shoal_codec_ternary,
                                .block = blocks[bi],
                                .round = (shoal_round_t)round,
                                .seed = 3 + (uint64_t)n,
                                .step = 9,
                                .scales = scales,
                                .wide = form == 1,
                                .packed = form == 2,
                            };
                            random_wire(b->wire_in, c.ops->wire_bytes(&c, count));
                            char name[112];
                            snprintf(name, sizeof(name),
                                     "ternary form %d block %zu round %d count %zu first %zu",
                                     form, c.block, round, count, first);
                            shoal_codec_simd_enable(n % 2);
                            run_case(b, &c, d_scales, count, first, fb, fb >= FB_BOTH, name);
                            cu_user_free(d_scales);
                            free(scales);
                        }
    shoal_codec_simd_enable(1);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_CODEC) - before, launches);
    bufs_free(b);
}

/* ABSMAX: the largest magnitude of each block of the run, of src or of
 * src + addend, against shoal_codec_block_absmax_sum (either host path),
 * for both kinds (ternary without scales: the op reads none), runs from
 * the tensor's start and from a later block, and blocks of NaN only, of
 * -0 only and of subnormals only besides fill's specials. The value after
 * the last block must stay as it was; the longest run also writes into an
 * allocation of exactly its blocks, which the stand-in's reach check
 * takes as it is. */
static void test_absmax(void **state)
{
    (void)state;
    open_module();
    bufs_t *b = bufs_new();
    unsigned long before = cu_user_launches(SHOAL_K_CODEC);
    launches = 0;
    rng = 4;
    static const size_t acounts[4] = {1, 63, 1000, 4097};
    static float want[MAX_COUNT];
    int n = 0;
    for (int kind = SHOAL_DEV_CODEC_INT8; kind <= SHOAL_DEV_CODEC_TERNARY; kind++)
        for (int bi = 0; bi < 3; bi++)
            for (int ci = 0; ci < 4; ci++)
                for (int fi = 0; fi < 2; fi++)
                    for (int has_add = 0; has_add < 2; has_add++, n++) {
                        size_t count = acounts[ci], block = blocks[bi];
                        size_t nb = (count + block - 1) / block, first = fi * 37 * block;
                        size_t fbytes = count * sizeof(float), obytes = nb * sizeof(float);
                        fill(b->src, count, 1.0f, 1);
                        fill(b->add, count, 1e-2f, 1);
                        for (size_t i = block; i < count && i < 2 * block; i++)
                            b->src[i] = i % 2 ? NAN : -NAN;
                        for (size_t i = 2 * block; i < count && i < 3 * block; i++)
                            b->src[i] = -0.0f;
                        for (size_t i = 3 * block; i < count && i < 4 * block; i++)
                            b->src[i] = (float)((int)(i % 7) - 3) * 0x1p-147f;
                        float *h_add = has_add ? b->add : NULL;
                        void *d_add = has_add ? b->d_add : NULL;
                        cu_user_htod(b->d_src, b->src, fbytes);
                        cu_user_htod(b->d_add, b->add, fbytes);
                        memset(b->dst, 0x5a, obytes + sizeof(float));
                        cu_user_htod(b->d_dst, b->dst, obytes + sizeof(float));
                        shoal_codec_simd_enable(n % 2);
                        shoal_codec_block_absmax_sum(want, b->src, h_add, count, block);
                        want[nb] = b->dst[nb];

                        shoal_dev_codec_args_t a;
                        memset(&a, 0, sizeof(a));
                        a.op = SHOAL_DEV_CODEC_ABSMAX;
                        a.kind = (shoal_dev_codec_kind_t)kind;
                        a.block = block;
                        a.src = b->d_src;
                        a.addend = d_add;
                        a.dst = b->d_dst;
                        a.count = count;
                        a.first = first;
                        dev_run(b, &a);
                        char what[112];
                        snprintf(what, sizeof(what),
                                 "absmax kind %d block %zu count %zu first %zu addend %d", kind,
                                 block, count, first, has_add);
                        cu_user_dtoh(b->got, b->d_dst, obytes + sizeof(float));
                        check_floats(b->got, want, nb + 1, what);

                        if (count != 4097)
                            continue;
                        float *tight = cu_user_alloc(obytes);
                        a.dst = tight;
                        dev_run(b, &a);
                        cu_user_dtoh(b->got, tight, obytes);
                        check_floats(b->got, want, nb, what);
                        cu_user_free(tight);
                    }
    shoal_codec_simd_enable(1);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_CODEC) - before, launches);
    bufs_free(b);
}

/* MOMENTS' numbers as dev_ops.h defines them, written out independently
 * of the kernel's code: for each block, v = (double)(src[i] (+ add[i])),
 * their sum from 0.0 in order, then the sum of (v - sum / n)^2 from 0.0
 * in order. Each product is a statement of its own, so that no compiler
 * fuses it into the addition (clang contracts within an expression). */
static void moments_ref(double *out, const float *src, const float *add, size_t count,
                        size_t block)
{
    for (size_t lo = 0, b = 0; lo < count; lo += block, b++) {
        size_t hi = lo + block < count ? lo + block : count;
        double sum = 0.0, sq = 0.0;
        for (size_t i = lo; i < hi; i++) {
            float x = add ? src[i] + add[i] : src[i];
            sum = sum + (double)x;
        }
        double mean = sum / (double)(hi - lo);
        for (size_t i = lo; i < hi; i++) {
            float x = add ? src[i] + add[i] : src[i];
            double d = (double)x - mean;
            double d2 = d * d;
            sq = sq + d2;
        }
        out[2 * b] = sum;
        out[2 * b + 1] = sq;
    }
}

/* Equal bits, or NaN where the reference has NaN: which NaN an operation
 * gives (its sign and payload, the GPU's canonical one) is not promised. */
static void check_doubles(const double *got, const double *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (isnan(want[i]) ? isnan(got[i]) : memcmp(&got[i], &want[i], sizeof(double)) == 0)
            continue;
        fail_msg("%s: value %zu is %a, the reference's is %a", what, i, got[i], want[i]);
    }
}

/* MOMENTS: each block's sum and sum of squared deviations, of src or of
 * src + addend, bitwise against moments_ref, for both kinds (ternary
 * without scales: the op reads none), blocks 32/64/128, counts that do
 * and do not fill their last block, runs from the tensor's start and
 * from a later block, over values of mixed magnitudes (where the order of
 * the additions shows in the bits) and, in a second pass, with NaN,
 * infinities and blocks of +inf only and of both infinities. The double
 * after the last block must stay as it was; the longest run also writes
 * into an allocation of exactly its doubles, which the stand-in's reach
 * check takes as it is. */
static void test_moments(void **state)
{
    (void)state;
    open_module();
    bufs_t *b = bufs_new();
    unsigned long before = cu_user_launches(SHOAL_K_CODEC);
    launches = 0;
    rng = 5;
    static const size_t mcounts[4] = {1, 63, 1000, 4097};
    static double want[2 * MAX_COUNT + 1], got[2 * MAX_COUNT + 1];
    int n = 0;
    for (int specials = 0; specials < 2; specials++)
        for (int bi = 0; bi < 3; bi++)
            for (int ci = 0; ci < 4; ci++)
                for (int fi = 0; fi < 2; fi++)
                    for (int has_add = 0; has_add < 2; has_add++, n++) {
                        size_t count = mcounts[ci], block = blocks[bi];
                        size_t nb = (count + block - 1) / block, first = fi * 37 * block;
                        size_t fbytes = count * sizeof(float);
                        size_t obytes = 2 * nb * sizeof(double);
                        int kind = n % 2 ? SHOAL_DEV_CODEC_TERNARY : SHOAL_DEV_CODEC_INT8;
                        fill(b->src, count, 1.0f, specials);
                        fill(b->add, count, 1e-2f, specials);
                        if (specials) {
                            for (size_t i = block; i < count && i < 2 * block; i++)
                                b->src[i] = INFINITY;
                            for (size_t i = 2 * block; i < count && i < 3 * block; i++)
                                b->src[i] = i % 2 ? INFINITY : -INFINITY;
                        }
                        float *h_add = has_add ? b->add : NULL;
                        void *d_add = has_add ? b->d_add : NULL;
                        cu_user_htod(b->d_src, b->src, fbytes);
                        cu_user_htod(b->d_add, b->add, fbytes);
                        memset(got, 0x5a, obytes + sizeof(double));
                        cu_user_htod(b->d_wire, got, obytes + sizeof(double));
                        moments_ref(want, b->src, h_add, count, block);
                        want[2 * nb] = got[2 * nb];

                        shoal_dev_codec_args_t a;
                        memset(&a, 0, sizeof(a));
                        a.op = SHOAL_DEV_CODEC_MOMENTS;
                        a.kind = (shoal_dev_codec_kind_t)kind;
                        a.block = block;
                        a.src = b->d_src;
                        a.addend = d_add;
                        a.wire_out = b->d_wire;
                        a.count = count;
                        a.first = first;
                        dev_run(b, &a);
                        char what[128];
                        snprintf(what, sizeof(what),
                                 "moments kind %d block %zu count %zu first %zu addend %d "
                                 "specials %d",
                                 kind, block, count, first, has_add, specials);
                        cu_user_dtoh(got, b->d_wire, obytes + sizeof(double));
                        check_doubles(got, want, 2 * nb + 1, what);

                        if (count != 4097)
                            continue;
                        void *tight = cu_user_alloc(obytes);
                        a.wire_out = tight;
                        dev_run(b, &a);
                        cu_user_dtoh(got, tight, obytes);
                        check_doubles(got, want, 2 * nb, what);
                        cu_user_free(tight);
                    }
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_CODEC) - before, launches);
    bufs_free(b);
}

/* What the entry refuses, before anything is queued. */
static void test_refused(void **state)
{
    (void)state;
    open_module();
    bufs_t *b = bufs_new();
    unsigned long before = cu_user_launches(SHOAL_K_CODEC);
    float *d_scales = cu_user_alloc(64 * sizeof(float));
    shoal_codec_t c = {.ops = &shoal_codec_ternary, .block = 32, .scales = d_scales};
    shoal_dev_codec_args_t a = dev_args(&c, SHOAL_DEV_CODEC_ENCODE, d_scales, 100, 0);
    a.wire_out = b->d_wire;
    a.src = b->d_src;
    assert_int_equal(ops->codec(&a, b->stream), SHOAL_OK);
    assert_int_equal(ops->stream_sync(b->stream), SHOAL_OK);

    shoal_dev_codec_args_t bad = a;
    bad.wide = bad.packed = 1; /* no such wire: the host's wire_bytes is 0 */
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = a;
    bad.block = 48;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = a;
    bad.round = 7;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = a;
    bad.kind = (shoal_dev_codec_kind_t)5;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = a;
    bad.op = (shoal_dev_codec_op_t)9;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = a;
    bad.scales = NULL;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = a;
    bad.op = SHOAL_DEV_CODEC_ADD_ENCODE; /* without wire_in */
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = a;
    bad.op = SHOAL_DEV_CODEC_DECODE; /* without dst or wire_in */
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    /* ABSMAX: from a value that is not a block's first (even for no
     * values), without dst or without src. */
    shoal_dev_codec_args_t am = a;
    am.op = SHOAL_DEV_CODEC_ABSMAX;
    am.wire_out = NULL;
    am.dst = b->d_dst;
    am.first = 64;
    bad = am;
    bad.first = 48;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad.count = 0;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = am;
    bad.dst = NULL;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = am;
    bad.src = NULL;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = am;
    bad.count = 0;
    bad.src = bad.dst = NULL;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_OK);
    /* MOMENTS: from a value that is not a block's first (even for no
     * values), without wire_out, without src, or into doubles that are
     * not aligned. */
    shoal_dev_codec_args_t mo = a;
    mo.op = SHOAL_DEV_CODEC_MOMENTS;
    mo.first = 64;
    bad = mo;
    bad.first = 48;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad.count = 0;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = mo;
    bad.wire_out = NULL;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = mo;
    bad.src = NULL;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = mo;
    bad.wire_out = (unsigned char *)b->d_wire + 4;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_ERR_INVALID_ARG);
    bad = mo;
    bad.count = 0;
    bad.src = NULL;
    bad.wire_out = NULL;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_OK);
    assert_int_equal(ops->codec(NULL, b->stream), SHOAL_ERR_INVALID_ARG);
    /* Nothing to do for no values, even with no buffers. */
    bad = a;
    bad.count = 0;
    bad.src = NULL;
    assert_int_equal(ops->codec(&bad, b->stream), SHOAL_OK);
    if (cu_user_is_standin())
        assert_int_equal(cu_user_launches(SHOAL_K_CODEC) - before, 1);
    cu_user_free(d_scales);
    bufs_free(b);
}

int main(void)
{
    int rc;
    if (!cu_user_testable(&rc))
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int8),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_ternary),
        cmocka_unit_test(test_absmax),
        cmocka_unit_test(test_moments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
