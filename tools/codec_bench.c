/* codec_bench: speed of the int8 codec (-t: the ternary one, with its
 * 4-bit wire) on one core, set against memcpy of the same fp32 input in
 * the same run.
 *
 * For each size (bytes of fp32 input, -b to -e by a factor -f), every
 * repetition times, one after the other: memcpy of the input, encode
 * (nearest, then stochastic), decode, and add_encode (nearest, then
 * stochastic: decode an incoming wire, add a second input, requantise into
 * another wire). The table gives the median over -n repetitions in GB/s of
 * fp32 processed (the input, or decode's output) and its ratio to memcpy's.
 * -r also writes residuals (error feedback), -s runs the scalar references
 * instead of the kernels. -E adds the last residual (a third array) to the
 * input of encode and add_encode as error feedback does, fused into the
 * codec's pass (its addend); -U adds it the way it was added before the
 * fusion, in a pass of its own into a fourth array, timed with the codec.
 * The ternary codec's shared scales are the block maxima of the input
 * (shoal_codec_block_absmax), computed before the clock runs.
 * Single-threaded; pin it (taskset) for steadier figures. */
#include "compress/codec.h"
#include "base/config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CODEC_BENCH_MAX_RUNS 1000

typedef struct {
    size_t min_bytes, max_bytes;
    long factor;
    long runs;
    long block;
    int residual;
    int scalar;
    int ef; /* error feedback: 0 none, CODEC_BENCH_EF_FUSED or _UNFUSED */
    int ternary; /* -t: the ternary codec, 4-bit wire */
} codec_bench_opts_t;

enum { CODEC_BENCH_EF_FUSED = 1, CODEC_BENCH_EF_UNFUSED };

/* The columns, in the order each repetition runs them. */
enum {
    CODEC_BENCH_MEMCPY,
    CODEC_BENCH_ENC_NEAR,
    CODEC_BENCH_ENC_STOCH,
    CODEC_BENCH_DECODE,
    CODEC_BENCH_ADD_NEAR,
    CODEC_BENCH_ADD_STOCH,
    CODEC_BENCH_COLS
};

static const char *const codec_bench_col_names[CODEC_BENCH_COLS] = {
    "memcpy", "enc-near", "enc-stoch", "decode", "add-near", "add-stoch",
};

typedef struct {
    float *src, *local, *dst, *res;
    float *add, *sum; /* error feedback: the last residual, input + it */
    unsigned char *wire_in, *wire_out;
} codec_bench_bufs_t;

static double codec_bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void codec_bench_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [-b min] [-e max] [-f factor] [-n runs] [-B block] [-r] [-E|-U] [-s] "
            "[-t] [-h]\n"
            "  -b min     smallest input, bytes of fp32 (default 1M)\n"
            "  -e max     largest input (default 64M)\n"
            "  -f factor  size step, multiplicative (default 4)\n"
            "  -n runs    repetitions per size, the median is shown (default 9)\n"
            "  -B block   values per block: 32, 64 or 128 (default 64)\n"
            "  -r         also write residuals (error feedback)\n"
            "  -E         error feedback fused: encode and add_encode add the last\n"
            "             residual as they go (implies -r)\n"
            "  -U         error feedback unfused: input + last residual summed in a\n"
            "             pass of its own first, timed with the codec (implies -r)\n"
            "  -s         scalar references instead of the kernels\n"
            "  -t         the ternary codec (4-bit wire, shared scales: the input's\n"
            "             block maxima) instead of int8\n"
            "  -h         this text\n",
            prog);
}

static int codec_bench_parse_long(int flag, const char *text, long min, long max, long *out_p)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min || v > max) {
        fprintf(stderr, "codec_bench: -%c wants an integer in [%ld, %ld], not \"%s\"\n", flag,
                min, max, text);
        return -1;
    }
    *out_p = v;
    return 0;
}

static int codec_bench_parse_bytes(int flag, const char *text, size_t *out_p)
{
    if (shoal_config_parse_size(text, out_p) != 0 || *out_p < sizeof(float)) {
        fprintf(stderr, "codec_bench: -%c wants a size such as 4K, 64M, not \"%s\"\n", flag,
                text);
        return -1;
    }
    return 0;
}

static int codec_bench_parse(int argc, char **argv, codec_bench_opts_t *o)
{
    int opt;
    while ((opt = getopt(argc, argv, "b:e:f:n:B:rEUsth")) != -1) {
        switch (opt) {
        case 'b':
            if (codec_bench_parse_bytes(opt, optarg, &o->min_bytes))
                return -1;
            break;
        case 'e':
            if (codec_bench_parse_bytes(opt, optarg, &o->max_bytes))
                return -1;
            break;
        case 'f':
            if (codec_bench_parse_long(opt, optarg, 2, 1024, &o->factor))
                return -1;
            break;
        case 'n':
            if (codec_bench_parse_long(opt, optarg, 1, CODEC_BENCH_MAX_RUNS, &o->runs))
                return -1;
            break;
        case 'B':
            if (codec_bench_parse_long(opt, optarg, 32, 128, &o->block) ||
                (o->block != 32 && o->block != 64 && o->block != 128)) {
                fprintf(stderr, "codec_bench: -B wants 32, 64 or 128\n");
                return -1;
            }
            break;
        case 'r': o->residual = 1; break;
        case 'E': o->residual = 1; o->ef = CODEC_BENCH_EF_FUSED; break;
        case 'U': o->residual = 1; o->ef = CODEC_BENCH_EF_UNFUSED; break;
        case 's': o->scalar = 1; break;
        case 't': o->ternary = 1; break;
        case 'h': codec_bench_usage(stdout, argv[0]); exit(0);
        default: codec_bench_usage(stderr, argv[0]); return -1;
        }
    }
    if (optind != argc || o->min_bytes > o->max_bytes) {
        codec_bench_usage(stderr, argv[0]);
        return -1;
    }
    return 0;
}

/* Gradient-like values: mostly small, of varying magnitude, both signs. */
static void codec_bench_fill(float *x, size_t count, uint32_t seed)
{
    uint32_t s = seed | 1;
    for (size_t i = 0; i < count; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        float v = (float)(int32_t)(s >> 8) * (1.0f / 8388608.0f) - 1.0f;
        x[i] = v * (float)(1u << (s & 7)) * 1e-3f;
    }
}

static void codec_bench_free(codec_bench_bufs_t *b)
{
    free(b->src);
    free(b->local);
    free(b->dst);
    free(b->res);
    free(b->wire_in);
    free(b->wire_out);
    free(b->add);
    free(b->sum);
}

static int codec_bench_alloc(codec_bench_bufs_t *b, size_t count, size_t wire)
{
    memset(b, 0, sizeof(*b));
    b->src = malloc(count * sizeof(float));
    b->local = malloc(count * sizeof(float));
    b->dst = malloc(count * sizeof(float));
    b->res = malloc(count * sizeof(float));
    b->wire_in = malloc(wire);
    b->wire_out = malloc(wire);
    b->add = malloc(count * sizeof(float));
    b->sum = malloc(count * sizeof(float));
    if (!b->src || !b->local || !b->dst || !b->res || !b->wire_in || !b->wire_out || !b->add ||
        !b->sum) {
        fprintf(stderr, "codec_bench: out of memory for %zu values\n", count);
        codec_bench_free(b);
        return -1;
    }
    codec_bench_fill(b->src, count, 1);
    codec_bench_fill(b->local, count, 2);
    codec_bench_fill(b->add, count, 3);
    memset(b->sum, 0, count * sizeof(float));
    /* Touch every page before the clock runs. */
    memset(b->dst, 0, count * sizeof(float));
    memset(b->res, 0, count * sizeof(float));
    memset(b->wire_in, 0, wire);
    memset(b->wire_out, 0, wire);
    return 0;
}

/* The input of an encode with error feedback ef: x itself and the addend
 * for the fused pass, or x + addend summed first (unfused). */
static const float *codec_bench_ef_input(int ef, codec_bench_bufs_t *b, const float *x,
                                         size_t count, const float **add_p)
{
    *add_p = ef == CODEC_BENCH_EF_FUSED ? b->add : NULL;
    if (ef != CODEC_BENCH_EF_UNFUSED)
        return x;
    for (size_t i = 0; i < count; i++)
        b->sum[i] = x[i] + b->add[i];
    return b->sum;
}

/* Seconds of one run of column col. */
static double codec_bench_once(int col, shoal_codec_t *c, codec_bench_bufs_t *b, size_t count,
                               float *res, int ef)
{
    const shoal_codec_ops_t *ops = c->ops;
    const float *in, *add;
    double t0 = codec_bench_now_s();
    switch (col) {
    case CODEC_BENCH_MEMCPY: memcpy(b->dst, b->src, count * sizeof(float)); break;
    case CODEC_BENCH_ENC_NEAR:
    case CODEC_BENCH_ENC_STOCH:
        c->round = col == CODEC_BENCH_ENC_NEAR ? SHOAL_ROUND_NEAREST : SHOAL_ROUND_STOCHASTIC;
        in = codec_bench_ef_input(ef, b, b->src, count, &add);
        ops->encode(c, b->wire_in, in, add, res, count, 0);
        break;
    case CODEC_BENCH_DECODE: ops->decode(c, b->dst, b->wire_in, count, 0); break;
    case CODEC_BENCH_ADD_NEAR:
    case CODEC_BENCH_ADD_STOCH:
        c->round = col == CODEC_BENCH_ADD_NEAR ? SHOAL_ROUND_NEAREST : SHOAL_ROUND_STOCHASTIC;
        in = codec_bench_ef_input(ef, b, b->local, count, &add);
        ops->add_encode(c, b->wire_out, b->wire_in, in, add, res, count, 0);
        break;
    default: break;
    }
    return codec_bench_now_s() - t0;
}

static int codec_bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int codec_bench_size(const codec_bench_opts_t *o, size_t bytes)
{
    size_t count = bytes / sizeof(float);
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = (size_t)o->block, .seed = 42};
    float *scales = NULL;
    if (o->ternary) {
        c.ops = &shoal_codec_ternary;
        c.packed = 1;
        scales = malloc(((count + c.block - 1) / c.block + 1) * sizeof(float));
        if (!scales) {
            fprintf(stderr, "codec_bench: out of memory for %zu scales\n", count / c.block);
            return -1;
        }
        c.scales = scales;
    }
    codec_bench_bufs_t b;
    if (codec_bench_alloc(&b, count, c.ops->wire_bytes(&c, count))) {
        free(scales);
        return -1;
    }
    if (scales)
        shoal_codec_block_absmax(scales, b.src, count, c.block);
    float *res = o->residual ? b.res : NULL;
    static double times[CODEC_BENCH_COLS][CODEC_BENCH_MAX_RUNS];
    for (int col = 0; col < CODEC_BENCH_COLS; col++) /* warm up */
        codec_bench_once(col, &c, &b, count, res, o->ef);
    for (long r = 0; r < o->runs; r++) {
        c.step = (uint64_t)r;
        for (int col = 0; col < CODEC_BENCH_COLS; col++)
            times[col][r] = codec_bench_once(col, &c, &b, count, res, o->ef);
    }
    double gbs[CODEC_BENCH_COLS];
    for (int col = 0; col < CODEC_BENCH_COLS; col++) {
        qsort(times[col], (size_t)o->runs, sizeof(double), codec_bench_cmp);
        double t = times[col][o->runs / 2];
        gbs[col] = t > 0 ? (double)(count * sizeof(float)) / t / 1e9 : 0;
    }
    printf("%10zu %8.2f", count * sizeof(float), gbs[CODEC_BENCH_MEMCPY]);
    for (int col = 1; col < CODEC_BENCH_COLS; col++)
        printf("  %6.2f (%4.2fx)", gbs[col],
               gbs[CODEC_BENCH_MEMCPY] > 0 ? gbs[col] / gbs[CODEC_BENCH_MEMCPY] : 0);
    printf("\n");
    fflush(stdout);
    codec_bench_free(&b);
    free(scales);
    return 0;
}

/* The widest vector extension of the CPU, which the kernels' loader
 * picks; "scalar" under -s. */
static const char *codec_bench_kernels(int scalar)
{
    if (scalar)
        return "scalar reference";
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f"))
        return "kernels for avx512";
    if (__builtin_cpu_supports("avx2"))
        return "kernels for avx2";
#endif
    return "baseline kernels";
}

int main(int argc, char **argv)
{
    codec_bench_opts_t o = {
        .min_bytes = 1u << 20, .max_bytes = 64u << 20, .factor = 4, .runs = 9, .block = 64,
    };
    if (codec_bench_parse(argc, argv, &o))
        return 2;
    shoal_codec_simd_enable(!o.scalar);
    static const char *const ef_names[] = {"none", "fused", "unfused (a pass of its own)"};
    printf("# codec_bench: %s, block %ld, %s, residuals %s, error feedback %s, 1 thread, "
           "median of %ld runs\n",
           o.ternary ? "ternary (4-bit wire)" : "int8", o.block, codec_bench_kernels(o.scalar), o.residual ? "on" : "off", ef_names[o.ef],
           o.runs);
    printf("# GB/s of fp32 input (decode: output), and the ratio to memcpy of the same bytes\n");
    printf("#    bytes   %s", codec_bench_col_names[0]);
    for (int col = 1; col < CODEC_BENCH_COLS; col++)
        printf("  %14s", codec_bench_col_names[col]);
    printf("\n");
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
        if (codec_bench_size(&o, bytes))
            return 2;
        if (bytes > o.max_bytes / (size_t)o.factor)
            break;
        bytes *= (size_t)o.factor;
    }
    return 0;
}
