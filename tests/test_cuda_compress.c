/* Compressed all-reduces of device tensors (shoal_allreduce_compressed_stream,
 * api/compressor_dev.c), over forked ranks on shared memory and tcp. In
 * make test the driver is the CPU stand-in of tests/cuda/, which runs the
 * module's kernels' own element functions; make test-gpu runs the same
 * binary on the real driver.
 *
 * - INT8 and TERNARY (with and without clipping), float32, float16 and
 *   bfloat16, SUM and AVG, error feedback on
 *   and off, nearest and stochastic rounding, blocks 32, 64 and 128,
 *   counts 1, odd and multi-block, in place and not, 1 to 8 ranks, three
 *   calls in a row on one compressor (the residual and the step carried
 *   on the device): the result and every rank's residual are bitwise
 *   those of a model of the schedule built here from the host codec, on
 *   every rank's input; summed over the ranks, the inputs and the last
 *   residuals are the result and the new residuals, up to fp32 rounding
 *   (error feedback loses nothing);
 * - stream order: the call returns while its stream is held, and work
 *   queued behind it on the same stream sees its result; the codec ran as
 *   device kernels (the stand-in counts them);
 * - a group runs its calls at its end, each the model's (TERNARY, two
 *   calls of its own, is refused inside one);
 * - checkpoints: a device compressor's state restores into a host
 *   compressor byte for byte and back, and a device call after set_state
 *   starts from the restored residual;
 * - a rank that dies under a call becomes an error on the others, whose
 *   streams go on; the residual that call left is refused as a
 *   checkpoint until reset;
 * - POWERSGD (matrices and a vector in one bucket, warm-up, float32 and
 *   bfloat16, SUM and AVG, with and without error feedback): the result,
 *   the residual and the state agree with a host compressor's on the same
 *   inputs, to the products' rounding (the device's sums run in cuBLAS's
 *   order); the products and the orthonormalisation ran on the device;
 * - (the compressed all-gather, reduce-scatter and all-to-all of device
 *   tensors: test_cuda_compress_colls.c);
 * - refusals, with the communicator still usable: PowerSGD in a group,
 *   host memory in the stream form, a host call once the state is on a
 *   device. */
#include "cuda_user.h"
#include "harness.h"

#include "api/compressor_priv.h"
#include "base/dtype.h"
#include "compress/codec.h"
#include "core/comm.h"
#include "core/dev_priv.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 16384
#define CALLS 3

static const int all_ranks[] = {1, 2, 3, 5, 8};
static const int quick_ranks[] = {1, 3};

typedef struct {
    shoal_compress_kind_t kind;
    shoal_dtype_t dtype;
    shoal_op_t op;
    int ef, stochastic;
    unsigned block;
    size_t count;
    int inplace;
    float clip; /* TERNARY's clip_sigma */
} ccase_t;

/* Rank r's input value i of call k, as fp32 (exact in every dtype the
 * case uses: a few significant bits, magnitudes varying by block). */
static float input_of(int r, int k, size_t i)
{
    uint32_t h = harness_mix((uint32_t)(r * 7919 + k * 104729) ^ (uint32_t)i * 2654435761u);
    float mag = ldexpf(1.0f, (int)((i / 50) % 9) - 4);
    return (float)((int)(h >> 24) - 128) / 64.0f * mag;
}

static uint16_t narrow16(shoal_dtype_t dt, float f)
{
    return dt == SHOAL_FLOAT16 ? shoal_f32_to_f16(f) : shoal_f32_to_bf16(f);
}

static float widen16(shoal_dtype_t dt, uint16_t h)
{
    return dt == SHOAL_FLOAT16 ? shoal_f16_to_f32(h) : shoal_bf16_to_f32(h);
}

/* The schedule's model: chunk j is blocks nb j / n .. nb (j + 1) / n. */
static void chunk_of(size_t count, size_t block, int n, int j, size_t *lo, size_t *len)
{
    size_t nb = count / block + (count % block != 0);
    size_t b0 = nb * (size_t)j / (size_t)n, b1 = nb * ((size_t)j + 1) / (size_t)n;
    size_t hi = b1 * block < count ? b1 * block : count;
    *lo = b0 * block;
    *len = hi > *lo ? hi - *lo : 0;
}

static shoal_codec_t model_codec(const ccase_t *cc, uint64_t seed, int r, uint64_t step)
{
    return (shoal_codec_t){
        .ops = &shoal_codec_int8, .block = cc->block,
        .round = cc->stochastic ? SHOAL_ROUND_STOCHASTIC : SHOAL_ROUND_NEAREST,
        .seed = seed ^ ((uint64_t)r + 1) * 0xd1342543de82ef95ull, .step = step,
    };
}

/* TERNARY's clipping bound of one rank: k population deviations of v =
 * input plus residual, from each block's sum and squared deviations from
 * its own mean (in the values' order), combined block by block. */
static float model_bound(const float *x, const float *res, size_t count, size_t block, float k)
{
    double total = 0, m2 = 0, *sums = calloc(count / block + 2, sizeof(double)),
           *devs = calloc(count / block + 2, sizeof(double));
    size_t nb = 0;
    for (size_t b0 = 0; b0 < count; b0 += block, nb++) {
        size_t n = count - b0 < block ? count - b0 : block;
        for (size_t i = b0; i < b0 + n; i++)
            sums[nb] += res ? (double)(x[i] + res[i]) : (double)x[i];
        double mb = sums[nb] / (double)n;
        for (size_t i = b0; i < b0 + n; i++) {
            double d = (res ? (double)(x[i] + res[i]) : (double)x[i]) - mb;
            devs[nb] += d * d;
        }
        total += sums[nb];
    }
    double mean = total / (double)count;
    for (size_t b = 0; b < nb; b++) {
        size_t n = b + 1 < nb || count % block == 0 ? block : count % block;
        double d = sums[b] / (double)n - mean;
        m2 += devs[b] + (double)n * (d * d);
    }
    free(sums);
    free(devs);
    double bound = (double)k * sqrt(m2 / (double)count);
    return bound > 0 && bound <= 3.4028234663852886e38 ? (float)bound : 0.0f;
}

/* TERNARY's model on n > 1 ranks: shared scales (each rank's block
 * maxima of input plus residual, clipped to its bound, rounded up to
 * bf16, their max), each rank's codes and residual, the codes summed, the
 * sum decoded. */
static void model_ternary(const ccase_t *cc, uint64_t seed, int n, uint64_t step, float **x,
                          float **res, float *out)
{
    size_t count = cc->count, nb = count / cc->block + (count % cc->block != 0);
    float *scales = calloc(nb, sizeof(float));
    int32_t *sum = calloc(count, sizeof(int32_t));
    int8_t *wire = malloc(count);
    for (int r = 0; r < n; r++) {
        float bound = cc->clip > 0 ? model_bound(x[r], res ? res[r] : NULL, count, cc->block,
                                                 cc->clip)
                                   : 0.0f;
        for (size_t b = 0; b < nb; b++) {
            float m = 0.0f;
            for (size_t i = b * cc->block; i < count && i < (b + 1) * cc->block; i++) {
                float v = res ? x[r][i] + res[r][i] : x[r][i];
                if (fabsf(v) > m)
                    m = fabsf(v);
            }
            if (bound > 0)
                m = fminf(m, bound);
            float up = shoal_bf16_to_f32(shoal_comp_scale_bf16_up(m));
            if (up > scales[b])
                scales[b] = up;
        }
    }
    for (int r = 0; r < n; r++) {
        shoal_codec_t c = {
            .ops = &shoal_codec_ternary, .block = cc->block, .round = SHOAL_ROUND_STOCHASTIC,
            .seed = seed ^ ((uint64_t)r + 1) * 0xd1342543de82ef95ull, .step = step,
            .scales = scales,
        };
        c.ops->encode(&c, wire, x[r], res ? res[r] : NULL, res ? res[r] : NULL, count, 0);
        for (size_t i = 0; i < count; i++)
            sum[i] += wire[i];
    }
    for (size_t i = 0; i < count; i++)
        wire[i] = (int8_t)sum[i];
    shoal_codec_t d = {.ops = &shoal_codec_ternary, .block = cc->block, .scales = scales};
    d.ops->decode(&d, out, wire, count, 0);
    free(scales);
    free(sum);
    free(wire);
}

/* One call of the model: x[r] the ranks' fp32 inputs, res[r] their last
 * residuals (updated in place; NULL without error feedback); out the fp32
 * result (before AVG and narrowing). */
static void model_call(const ccase_t *cc, uint64_t seed, int n, uint64_t step, float **x,
                       float **res, float *out)
{
    size_t count = cc->count, cl = count;
    shoal_codec_t c0 = model_codec(cc, seed, 0, step);
    size_t wb = c0.ops->wire_bytes(&c0, cl);
    unsigned char *wire = malloc(wb + 1);
    float *dec = malloc(cl * sizeof(float) + 4), *sum = malloc(cl * sizeof(float) + 4);
    float *err = malloc(cl * sizeof(float) + 4);
    float **newres = calloc((size_t)n, sizeof(*newres));
    for (int r = 0; r < n && res; r++)
        newres[r] = malloc(count * sizeof(float) + 4);
    if (n == 1) {
        for (size_t i = 0; i < count; i++)
            out[i] = res ? x[0][i] + res[0][i] : x[0][i];
        if (res)
            memset(res[0], 0, count * sizeof(float));
        goto done;
    }
    if (cc->kind == SHOAL_COMPRESS_TERNARY) {
        model_ternary(cc, seed, n, step, x, res, out);
        goto done;
    }
    for (int j = 0; j < n; j++) {
        size_t lo, len;
        chunk_of(count, cc->block, n, j, &lo, &len);
        if (len == 0)
            continue;
        for (size_t i = 0; i < len; i++)
            sum[i] = res ? x[j][lo + i] + res[j][lo + i] : x[j][lo + i];
        for (int k = 1; k < n; k++) {
            int r = (j - k + n) % n;
            shoal_codec_t c = model_codec(cc, seed, r, step);
            c.ops->encode(&c, wire, x[r] + lo, res ? res[r] + lo : NULL,
                          res ? newres[r] + lo : NULL, len, lo);
            c.ops->decode(&c, dec, wire, len, lo);
            for (size_t i = 0; i < len; i++)
                sum[i] = sum[i] + dec[i];
        }
        shoal_codec_t own = model_codec(cc, seed, j, step);
        own.ops->encode(&own, wire, sum, NULL, err, len, lo);
        own.ops->decode(&own, out + lo, wire, len, lo);
        if (res)
            memcpy(newres[j] + lo, err, len * sizeof(float));
    }
    for (int r = 0; r < n && res; r++)
        memcpy(res[r], newres[r], count * sizeof(float));
done:
    for (int r = 0; r < n && res; r++)
        free(newres[r]);
    free(newres);
    free(wire);
    free(dec);
    free(sum);
    free(err);
}

static int rank_open(int rank, shoal_comm_t *comm, int nranks, const shoal_unique_id_t *id)
{
    char why[256];
    RANK_CHECK(cu_user_open(0, why, sizeof(why)) == 0, fail, "rank %d: %s", rank, why);
    RANK_CHECK(shoal_comm_init(nranks, id, rank, comm) == SHOAL_OK, fail, "init");
    return 0;
fail:
    return 1;
}

static int make_comp(shoal_comm_t comm, const ccase_t *cc, uint64_t seed, shoal_compressor_t *cp)
{
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, cc->kind);
    o.error_feedback = cc->ef;
    o.stochastic = cc->stochastic;
    o.block = cc->block;
    o.seed = seed;
    o.clip_sigma = cc->clip;
    return shoal_compressor_create(comm, &o, cc->count, cc->dtype, NULL, cp) != SHOAL_OK;
}

/* CALLS calls of case cc on one compressor, each checked against the
 * model; gate: the first call is queued behind a held stream. */
static int check_case(shoal_comm_t comm, void *stream, int rank, int n, const ccase_t *cc,
                      int gate)
{
    size_t count = cc->count, es = shoal_dtype_bytes(cc->dtype), bytes = count * es;
    uint64_t seed = 0x5eed0000u + count * 31 + cc->block;
    float **x = calloc((size_t)n, sizeof(*x)), **res = calloc((size_t)n, sizeof(*res));
    float *out = malloc(count * sizeof(float)), *want = malloc(count * sizeof(float));
    double *exact = malloc(count * sizeof(double)), *scale = malloc(count * sizeof(double));
    unsigned char *host = malloc(bytes), *got = cu_user_alloc_pinned(bytes);
    void *sbuf = cu_user_alloc(bytes), *rbuf = cc->inplace ? sbuf : cu_user_alloc(bytes);
    uint32_t *gate_word = cu_user_alloc_pinned(sizeof(uint32_t));
    shoal_compressor_t comp = NULL;
    int rc = 1;
    for (int r = 0; r < n; r++) {
        x[r] = malloc(count * sizeof(float));
        res[r] = cc->ef ? calloc(count, sizeof(float)) : NULL;
    }
    RANK_CHECK(make_comp(comm, cc, seed, &comp) == 0, out, "create: %s",
               shoal_comm_last_error(comm));
    for (int k = 0; k < CALLS; k++) {
        for (int r = 0; r < n; r++) {
            for (size_t i = 0; i < count; i++) {
                float v = input_of(r, k, i);
                x[r][i] = cc->dtype == SHOAL_FLOAT32 ? v : widen16(cc->dtype, narrow16(cc->dtype, v));
                if (r == rank && cc->dtype == SHOAL_FLOAT32)
                    memcpy(host + i * 4, &v, 4);
                else if (r == rank)
                    memcpy(host + i * 2, &(uint16_t){narrow16(cc->dtype, v)}, 2);
            }
        }
        /* Error feedback loses nothing (on the model, which the device
         * must match bit for bit): inputs plus last residuals are the
         * result plus the new residuals, up to fp32 rounding. */
        for (size_t i = 0; i < count && cc->ef; i++) {
            exact[i] = 0;
            scale[i] = 0;
            for (int r = 0; r < n; r++) {
                exact[i] += (double)x[r][i] + (double)res[r][i];
                scale[i] += fabs((double)x[r][i]) + fabs((double)res[r][i]);
            }
        }
        model_call(cc, seed, n, (uint64_t)k, x, cc->ef ? res : NULL, out);
        for (size_t i = 0; i < count && cc->ef; i++) {
            double acc = out[i];
            for (int r = 0; r < n; r++)
                acc += res[r][i];
            RANK_CHECK(fabs(acc - exact[i]) <= 8.0 * n * scale[i] * 0x1p-24, out,
                       "value %zu: inputs and residuals %.9g, result and residuals %.9g", i,
                       exact[i], acc);
        }
        for (size_t i = 0; i < count; i++)
            want[i] = cc->op == SHOAL_AVG && n > 1 ? out[i] * (1.0f / (float)n) : out[i];
        cu_user_htod(sbuf, host, bytes);
        shoal_compress_info_t info;
        if (gate && k == 0) {
            *gate_word = 0;
            cu_user_gate(stream, gate_word, 1);
        }
        shoal_status_t s = shoal_allreduce_compressed_stream(comp, sbuf, rbuf, cc->op, &info,
                                                             stream);
        RANK_CHECK(s == SHOAL_OK, out, "call %d: %s (%s)", k, shoal_status_string(s),
                   shoal_comm_last_error(comm));
        /* Behind the call on its stream: the copy of its result. */
        cu_user_copy_async(got, rbuf, bytes, stream);
        if (gate && k == 0) {
            RANK_CHECK(!cu_user_idle(stream), out, "rank %d: the stream ran past its gate",
                       rank);
            __atomic_store_n(gate_word, 1, __ATOMIC_RELEASE);
        }
        cu_user_sync(stream);
        RANK_CHECK(info.step == (uint64_t)k, out, "info.step %llu at call %d",
                   (unsigned long long)info.step, k);
        for (size_t i = 0; i < count; i++) {
            float g;
            if (cc->dtype == SHOAL_FLOAT32) {
                memcpy(&g, got + i * 4, 4);
                RANK_CHECK(memcmp(&g, &want[i], 4) == 0, out, "rank %d call %d value %zu: %a, "
                           "the model says %a", rank, k, i, (double)g, (double)want[i]);
            } else {
                uint16_t h;
                memcpy(&h, got + i * 2, 2);
                RANK_CHECK(h == narrow16(cc->dtype, want[i]), out, "rank %d call %d value %zu: "
                           "%#x, the model says %#x", rank, k, i, h,
                           narrow16(cc->dtype, want[i]));
            }
        }
        if (cc->ef) {
            const float *mine;
            RANK_CHECK(shoal_compressor_residual(comp, &mine) == SHOAL_OK, out, "residual");
            RANK_CHECK(memcmp(mine, res[rank], count * sizeof(float)) == 0, out,
                       "rank %d call %d: the residual differs from the model's", rank, k);
        }
    }
    rc = 0;
out:
    if (comp)
        shoal_compressor_destroy(comp);
    for (int r = 0; r < n; r++) {
        free(x[r]);
        free(res[r]);
    }
    free(x);
    free(res);
    free(out);
    free(want);
    free(exact);
    free(scale);
    free(host);
    cu_user_free_pinned(got);
    cu_user_free_pinned(gate_word);
    if (!cc->inplace)
        cu_user_free(rbuf);
    cu_user_free(sbuf);
    return rc;
}

/* How rank_matrix runs (NULL: one device, the path as set): the ranks on
 * devices devices (rank r on r % devices), and whether INT8's calls must
 * have gone device to device (1), must not have (0), or either (-1). */
typedef struct {
    int devices;
    int direct;
} matrix_arg_t;

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *varg)
{
    static const matrix_arg_t plain = {.devices = 1, .direct = -1};
    const matrix_arg_t *arg = varg ? varg : &plain;
    char why[256];
    shoal_comm_t comm;
    RANK_CHECK(cu_user_open(rank % arg->devices, why, sizeof(why)) == 0, fail, "rank %d: %s",
               rank, why);
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    void *stream = cu_user_stream();
    static const size_t counts[] = {1, 1001, 40001};
    static const shoal_dtype_t dtypes[] = {SHOAL_FLOAT32, SHOAL_FLOAT16, SHOAL_BFLOAT16};
    static const unsigned blocks[] = {32, 64, 128};
    int v = 0;
    for (size_t c = 0; c < 6; c++) {
        for (int d = 0; d < 3; d++, v++) {
            if (harness_quick() && d == 1)
                continue;
            ccase_t cc = {.kind = c < 3 ? SHOAL_COMPRESS_INT8 : SHOAL_COMPRESS_TERNARY,
                          .dtype = dtypes[d], .op = v & 1 ? SHOAL_AVG : SHOAL_SUM,
                          .ef = (v % 3) != 2, .stochastic = (v & 2) != 0,
                          .block = blocks[(size_t)v % 3], .count = counts[c % 3],
                          .inplace = (v % 4) == 1,
                          .clip = c >= 3 && (v & 1) == 0 ? 1.5f : 0.0f};
            if (check_case(comm, stream, rank, nranks, &cc, v == 0)) {
                fprintf(stderr, "# case: %s (clip %g) %s %s ef %d stochastic %d block %u count "
                        "%zu%s\n", cc.kind == SHOAL_COMPRESS_INT8 ? "int8" : "ternary",
                        (double)cc.clip,
                        shoal_dtype_name(cc.dtype), cc.op == SHOAL_AVG ? "avg" : "sum", cc.ef,
                        cc.stochastic, cc.block, cc.count, cc.inplace ? " in place" : "");
                goto fail;
            }
        }
    }
    /* A rank alone quantises nothing. */
    if (cu_user_is_standin() && nranks > 1)
        RANK_CHECK(cu_user_launches("shoal_k_codec") > 0, fail, "no codec kernel ran");
    unsigned long direct = comm->dev ? comm->dev->direct_runs : 0;
    RANK_CHECK(nranks == 1 || arg->direct < 0 || (arg->direct ? direct > 0 : direct == 0), fail,
               "rank %d: %lu calls went device to device, want %s", rank, direct,
               arg->direct ? "some" : "none");
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* Two INT8 calls inside a group run at its end, each the model's; a
 * TERNARY call (two calls of its own) is refused there. */
static int rank_group(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    ccase_t cc[2] = {
        {.kind = SHOAL_COMPRESS_INT8, .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM, .ef = 1,
         .block = 64, .count = 1001},
        {.kind = SHOAL_COMPRESS_INT8, .dtype = SHOAL_FLOAT32, .op = SHOAL_AVG, .ef = 1,
         .stochastic = 1, .block = 32, .count = 3001},
    };
    shoal_compressor_t comp[2] = {NULL, NULL}, tern = NULL;
    void *buf[2] = {NULL, NULL};
    float *got = malloc(3001 * sizeof(float)), *want = malloc(3001 * sizeof(float));
    float **x = calloc((size_t)nranks, sizeof(*x)), **res = calloc((size_t)nranks, sizeof(*res));
    int rc = 1;
    for (int r = 0; r < nranks; r++) {
        x[r] = malloc(3001 * sizeof(float));
        res[r] = malloc(3001 * sizeof(float));
    }
    for (int k = 0; k < 2; k++) {
        RANK_CHECK(make_comp(comm, &cc[k], 11 + (uint64_t)k, &comp[k]) == 0, out, "create");
        buf[k] = cu_user_alloc(cc[k].count * sizeof(float));
        for (size_t i = 0; i < cc[k].count; i++)
            got[i] = input_of(rank, k, i);
        cu_user_htod(buf[k], got, cc[k].count * sizeof(float));
    }
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_TERNARY);
    RANK_CHECK(shoal_compressor_create(comm, &o, 500, SHOAL_FLOAT32, NULL, &tern) == SHOAL_OK,
               out, "create ternary");
    RANK_CHECK(shoal_group_start() == SHOAL_OK, out, "group start");
    for (int k = 0; k < 2; k++)
        RANK_CHECK(shoal_allreduce_compressed_stream(comp[k], buf[k], buf[k], cc[k].op, NULL,
                                                     stream) == SHOAL_OK, out, "call %d: %s",
                   k, shoal_comm_last_error(comm));
    shoal_status_t s = shoal_allreduce_compressed_stream(tern, buf[1], buf[1], SHOAL_SUM, NULL,
                                                         stream);
    RANK_CHECK(nranks == 1 || (s == SHOAL_ERR_UNSUPPORTED &&
                               strstr(shoal_comm_last_error(comm), "group")), out,
               "ternary in a group: %s", shoal_status_string(s));
    RANK_CHECK(cu_user_idle(stream), out, "a grouped call queued work before the group's end");
    RANK_CHECK(shoal_group_end() == SHOAL_OK, out, "group end: %s", shoal_comm_last_error(comm));
    cu_user_sync(stream);
    for (int k = 0; k < 2; k++) {
        size_t count = cc[k].count;
        for (int r = 0; r < nranks; r++) {
            memset(res[r], 0, count * sizeof(float));
            for (size_t i = 0; i < count; i++)
                x[r][i] = input_of(r, k, i);
        }
        model_call(&cc[k], 11 + (uint64_t)k, nranks, 0, x, res, want);
        for (size_t i = 0; i < count && cc[k].op == SHOAL_AVG && nranks > 1; i++)
            want[i] = want[i] * (1.0f / (float)nranks);
        cu_user_dtoh(got, buf[k], count * sizeof(float));
        RANK_CHECK(memcmp(got, want, count * sizeof(float)) == 0, out,
                   "rank %d: grouped call %d is not the model's", rank, k);
    }
    rc = 0;
out:
    for (int k = 0; k < 2; k++) {
        if (comp[k])
            shoal_compressor_destroy(comp[k]);
        if (buf[k])
            cu_user_free(buf[k]);
    }
    if (tern)
        shoal_compressor_destroy(tern);
    for (int r = 0; r < nranks; r++) {
        free(x[r]);
        free(res[r]);
    }
    free(x);
    free(res);
    free(got);
    free(want);
    cu_user_stream_free(stream);
    if (shoal_comm_destroy(comm) != SHOAL_OK)
        rc = 1;
    return rc;
}

/* Checkpoints between a device compressor and a host one. */
static int rank_state(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    ccase_t cc = {.kind = SHOAL_COMPRESS_INT8, .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM, .ef = 1,
                  .stochastic = 1,
                  .block = 64, .count = 3001};
    size_t bytes = cc.count * 4, sz = 0, sz2 = 0;
    float *in = malloc(bytes);
    void *buf = cu_user_alloc(bytes);
    unsigned char *st1 = NULL, *st2 = NULL;
    shoal_compressor_t dev = NULL, host = NULL;
    for (size_t i = 0; i < cc.count; i++)
        in[i] = input_of(rank, 9, i);
    RANK_CHECK(make_comp(comm, &cc, 77, &dev) == 0 && make_comp(comm, &cc, 77, &host) == 0,
               fail, "create");
    for (int k = 0; k < 2; k++) {
        /* The stream is non-blocking: the synchronous copy into buf waits
         * for nothing on it, so the call before must be done. */
        cu_user_sync(stream);
        cu_user_htod(buf, in, bytes);
        RANK_CHECK(shoal_allreduce_compressed_stream(dev, buf, buf, SHOAL_SUM, NULL, stream) ==
                   SHOAL_OK, fail, "device call: %s", shoal_comm_last_error(comm));
    }
    RANK_CHECK(shoal_compressor_state_size(dev, &sz) == SHOAL_OK &&
               shoal_compressor_state_size(host, &sz2) == SHOAL_OK && sz == sz2, fail,
               "state sizes %zu and %zu", sz, sz2);
    st1 = malloc(sz);
    st2 = malloc(sz);
    /* get_state waits for the stream itself. */
    RANK_CHECK(shoal_compressor_get_state(dev, st1, sz) == SHOAL_OK, fail, "get_state");
    RANK_CHECK(shoal_compressor_set_state(host, st1, sz) == SHOAL_OK, fail, "host set_state");
    RANK_CHECK(shoal_compressor_get_state(host, st2, sz) == SHOAL_OK &&
               memcmp(st1, st2, sz) == 0, fail, "the host compressor's state differs");
    const float *r_dev;
    RANK_CHECK(shoal_compressor_residual(dev, &r_dev) == SHOAL_OK, fail, "residual");
    int nonzero = 0;
    for (size_t i = 0; i < cc.count; i++)
        nonzero |= r_dev[i] != 0.0f;
    RANK_CHECK(nranks == 1 || nonzero, fail, "a residual of zeros after two calls");
    /* Back to the device: a state with a residual of this rank's own, and
     * the next device call starts from it (the model with that residual). */
    float *fake = (float *)(st2 + sz - bytes);
    for (size_t i = 0; i < cc.count; i++)
        fake[i] = input_of(rank + 100, 3, i) / 1024.0f;
    RANK_CHECK(shoal_compressor_set_state(dev, st2, sz) == SHOAL_OK, fail, "device set_state");
    RANK_CHECK(shoal_compressor_get_state(dev, st1, sz) == SHOAL_OK &&
               memcmp(st1, st2, sz) == 0, fail, "the device state differs from what was set");
    {
        float **x = calloc((size_t)nranks, sizeof(*x)), **res = calloc((size_t)nranks,
                                                                         sizeof(*res));
        float *want = malloc(bytes), *got = malloc(bytes);
        for (int r = 0; r < nranks; r++) {
            x[r] = malloc(bytes);
            res[r] = malloc(bytes);
            for (size_t i = 0; i < cc.count; i++) {
                x[r][i] = input_of(r, 9, i);
                res[r][i] = input_of(r + 100, 3, i) / 1024.0f;
            }
        }
        uint64_t step;
        memcpy(&step, st2 + 3 * sizeof(uint64_t), sizeof(step));
        model_call(&cc, 77, nranks, step, x, res, want);
        cu_user_htod(buf, in, bytes);
        shoal_status_t s = shoal_allreduce_compressed_stream(dev, buf, buf, SHOAL_SUM, NULL,
                                                             stream);
        cu_user_sync(stream);
        cu_user_dtoh(got, buf, bytes);
        int same = s == SHOAL_OK && memcmp(got, want, bytes) == 0;
        /* The same state set before a compressor's first device call: that
         * call copies it in on its stream. */
        shoal_compressor_t fresh = NULL;
        int fresh_same = make_comp(comm, &cc, 77, &fresh) == 0 &&
                         shoal_compressor_set_state(fresh, st2, sz) == SHOAL_OK;
        cu_user_htod(buf, in, bytes);
        fresh_same = fresh_same && shoal_allreduce_compressed_stream(fresh, buf, buf, SHOAL_SUM,
                                                                     NULL, stream) == SHOAL_OK;
        cu_user_sync(stream);
        cu_user_dtoh(got, buf, bytes);
        fresh_same = fresh_same && memcmp(got, want, bytes) == 0;
        if (fresh)
            shoal_compressor_destroy(fresh);
        for (int r = 0; r < nranks; r++) {
            free(x[r]);
            free(res[r]);
        }
        free(x);
        free(res);
        free(want);
        free(got);
        RANK_CHECK(same, fail, "rank %d: the call after set_state is not the model's", rank);
        RANK_CHECK(fresh_same, fail, "rank %d: a first device call after set_state is not "
                   "the model's", rank);
    }
    RANK_CHECK(shoal_compressor_destroy(dev) == SHOAL_OK &&
               shoal_compressor_destroy(host) == SHOAL_OK, fail, "destroy");
    free(st1);
    free(st2);
    free(in);
    cu_user_free(buf);
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "comm destroy");
    return 0;
fail:
    return 1;
}

/* ---- PowerSGD: the device against a host compressor ---- */

static const size_t psgd_rows[] = {64, 1, 33}, psgd_cols[] = {48, 100, 17};
#define PSGD_COUNT (64 * 48 + 100 + 33 * 17)

/* The largest |a - b| over n values, against the largest |b|. */
static int close_enough(const float *a, const float *b, size_t n, double tol, double *err_p)
{
    double top = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        top = fmax(top, fabs((double)b[i]));
        err = fmax(err, fabs((double)a[i] - (double)b[i]));
    }
    *err_p = top > 0 ? err / top : err;
    return err <= tol * top + 1e-30;
}

static int rank_psgd(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    const shoal_compress_layout_t layout = {3, psgd_rows, psgd_cols};
    const size_t count = PSGD_COUNT;
    float *in = malloc(count * sizeof(float)), *host = malloc(count * sizeof(float)),
          *got = malloc(count * sizeof(float));
    uint16_t *in16 = malloc(count * 2), *got16 = malloc(count * 2);
    void *dbuf = cu_user_alloc(count * sizeof(float));
    unsigned char *st1 = NULL, *st2 = NULL;
    int rc = 1;
    for (int v = 0; v < 4; v++) {
        shoal_dtype_t dt = v & 2 ? SHOAL_BFLOAT16 : SHOAL_FLOAT32;
        shoal_op_t op = v & 1 ? SHOAL_AVG : SHOAL_SUM;
        size_t es = dt == SHOAL_FLOAT32 ? 4 : 2;
        shoal_compress_options_t o;
        shoal_compress_options_init(&o, SHOAL_COMPRESS_POWERSGD);
        o.rank = 4;
        o.warmup_steps = 1;
        o.seed = 21;
        o.error_feedback = v != 1;
        shoal_compressor_t dev = NULL, ref = NULL;
        RANK_CHECK(shoal_compressor_create(comm, &o, count, dt, &layout, &dev) == SHOAL_OK &&
                   shoal_compressor_create(comm, &o, count, dt, &layout, &ref) == SHOAL_OK, out,
                   "create: %s", shoal_comm_last_error(comm));
        for (int k = 0; k < CALLS; k++) {
            for (size_t i = 0; i < count; i++) {
                in[i] = input_of(rank, k + 10 * v, i);
                in16[i] = shoal_f32_to_bf16(in[i]);
            }
            const void *src = dt == SHOAL_FLOAT32 ? (const void *)in : (const void *)in16;
            memcpy(host, src, count * es);
            RANK_CHECK(shoal_allreduce_compressed(ref, host, host, op, NULL) == SHOAL_OK, out,
                       "host call: %s", shoal_comm_last_error(comm));
            cu_user_htod(dbuf, src, count * es);
            RANK_CHECK(shoal_allreduce_compressed_stream(dev, dbuf, dbuf, op, NULL, stream) ==
                       SHOAL_OK, out, "device call: %s", shoal_comm_last_error(comm));
            cu_user_sync(stream);
            double err;
            if (dt == SHOAL_FLOAT32) {
                cu_user_dtoh(got, dbuf, count * 4);
            } else {
                cu_user_dtoh(got16, dbuf, count * 2);
                memcpy(in16, host, count * 2);
                for (size_t i = 0; i < count; i++) {
                    got[i] = shoal_bf16_to_f32(got16[i]);
                    host[i] = shoal_bf16_to_f32(in16[i]);
                }
            }
            RANK_CHECK(close_enough(got, host, count, dt == SHOAL_FLOAT32 ? 1e-4 : 2e-2, &err),
                       out, "rank %d case %d call %d: the result is %g off the host's", rank, v,
                       k, err);
            if (o.error_feedback) {
                const float *rd, *rh;
                RANK_CHECK(shoal_compressor_residual(dev, &rd) == SHOAL_OK &&
                           shoal_compressor_residual(ref, &rh) == SHOAL_OK, out, "residual");
                RANK_CHECK(close_enough(rd, rh, count, dt == SHOAL_FLOAT32 ? 1e-4 : 2e-2, &err),
                           out, "rank %d case %d call %d: the residual is %g off the host's",
                           rank, v, k, err);
            }
        }
        /* The state (step, residual, Q) as the host's, to rounding; it
         * restores into the host compressor and back. */
        size_t sz, sz2;
        RANK_CHECK(shoal_compressor_state_size(dev, &sz) == SHOAL_OK &&
                   shoal_compressor_state_size(ref, &sz2) == SHOAL_OK && sz == sz2, out,
                   "state sizes");
        st1 = malloc(sz);
        st2 = malloc(sz);
        RANK_CHECK(shoal_compressor_get_state(dev, st1, sz) == SHOAL_OK &&
                   shoal_compressor_get_state(ref, st2, sz) == SHOAL_OK, out, "get_state");
        RANK_CHECK(memcmp(st1, st2, 6 * sizeof(uint64_t)) == 0, out, "the states' heads differ");
        double err;
        size_t nf = (sz - 6 * sizeof(uint64_t)) / sizeof(float);
        RANK_CHECK(close_enough((const float *)(st1 + 48), (const float *)(st2 + 48), nf, 1e-3,
                                &err), out, "rank %d case %d: the state is %g off the host's",
                   rank, v, err);
        RANK_CHECK(shoal_compressor_set_state(ref, st1, sz) == SHOAL_OK &&
                   shoal_compressor_set_state(dev, st2, sz) == SHOAL_OK &&
                   shoal_compressor_get_state(dev, st1, sz) == SHOAL_OK &&
                   memcmp(st1, st2, sz) == 0, out, "rank %d case %d: the states do not cross",
                   rank, v);
        free(st1);
        free(st2);
        st1 = st2 = NULL;
        shoal_compressor_destroy(dev);
        shoal_compressor_destroy(ref);
    }
    if (cu_user_is_standin()) {
        RANK_CHECK(cu_user_gemms() > 0, out, "no product ran on the device");
        RANK_CHECK(cu_user_launches("shoal_k_ortho") > 0, out,
                   "P was not orthonormalised on the device");
    }
    rc = 0;
out:
    free(st1);
    free(st2);
    free(in);
    free(host);
    free(got);
    free(in16);
    free(got16);
    cu_user_free(dbuf);
    cu_user_stream_free(stream);
    if (shoal_comm_destroy(comm) != SHOAL_OK)
        rc = 1;
    return rc;
}

/* Refusals leave the communicator usable. */
static int rank_refuse(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    void *stream = cu_user_stream();
    size_t count = 500, bytes = count * 4;
    void *buf = cu_user_alloc(bytes);
    float *hbuf = calloc(count, 4);
    shoal_compress_options_t o;
    shoal_compressor_t psgd = NULL, comp = NULL;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_POWERSGD);
    RANK_CHECK(shoal_compressor_create(comm, &o, count, SHOAL_FLOAT32, NULL, &psgd) == SHOAL_OK,
               fail, "create powersgd");
    RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group start");
    shoal_status_t s = shoal_allreduce_compressed_stream(psgd, buf, buf, SHOAL_SUM, NULL, stream);
    RANK_CHECK(shoal_group_end() == SHOAL_OK, fail, "group end");
    RANK_CHECK(s == SHOAL_ERR_UNSUPPORTED && strstr(shoal_comm_last_error(comm), "group"), fail,
               "powersgd on the device in a group: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    RANK_CHECK(shoal_allreduce_compressed(psgd, hbuf, hbuf, SHOAL_SUM, NULL) == SHOAL_OK, fail,
               "powersgd on host buffers: %s", shoal_comm_last_error(comm));
    RANK_CHECK(shoal_compressor_destroy(psgd) == SHOAL_OK, fail, "destroy powersgd");
    shoal_compress_options_init(&o, SHOAL_COMPRESS_INT8);
    RANK_CHECK(shoal_compressor_create(comm, &o, count, SHOAL_FLOAT32, NULL, &comp) == SHOAL_OK,
               fail, "create int8");
    s = shoal_allreduce_compressed_stream(comp, hbuf, hbuf, SHOAL_SUM, NULL, stream);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG && strstr(shoal_comm_last_error(comm), "device"),
               fail, "host memory: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    s = shoal_allreduce_compressed_stream(comp, buf, buf, SHOAL_MAX, NULL, stream);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "max: %s", shoal_status_string(s));
    RANK_CHECK(shoal_allreduce_compressed_stream(comp, buf, buf, SHOAL_SUM, NULL, stream) ==
               SHOAL_OK, fail, "a good call after the refusals: %s",
               shoal_comm_last_error(comm));
    s = shoal_allreduce_compressed(comp, hbuf, hbuf, SHOAL_SUM, NULL);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG && strstr(shoal_comm_last_error(comm), "stream-ordered"),
               fail, "a host call after a device one: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    cu_user_sync(stream);
    RANK_CHECK(shoal_compressor_destroy(comp) == SHOAL_OK, fail, "destroy");
    free(hbuf);
    cu_user_free(buf);
    cu_user_stream_free(stream);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "comm destroy");
    return 0;
fail:
    return 1;
}

/* A rank dies under a call: the others' calls fail (the error named by
 * the communicator), their streams go on, and the residual the stream
 * left is refused as a checkpoint until reset. arg: the kind. */
static int rank_peer_dies(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    if (rank_open(rank, &comm, nranks, id))
        return 1;
    ccase_t cc = {.kind = *(const shoal_compress_kind_t *)arg, .dtype = SHOAL_FLOAT32,
                  .op = SHOAL_SUM, .ef = 1, .block = 64, .count = 4000};
    shoal_status_t made_err = SHOAL_OK;
    shoal_compressor_t comp;
    int made = make_comp(comm, &cc, 5, &comp) == 0;
    if (rank == 1)
        raise(SIGKILL);
    /* The create is collective: the victim may die while a peer still
     * finishes it, which then fails on that peer, as it should. */
    if (!made && shoal_comm_get_async_error(comm, &made_err) == SHOAL_OK &&
        (made_err == SHOAL_ERR_PEER || made_err == SHOAL_ERR_TIMEOUT)) {
        shoal_comm_abort(comm);
        return 0;
    }
    RANK_CHECK(made, fail, "create: %s", shoal_comm_last_error(comm));
    void *buf = cu_user_alloc(cc.count * 4), *stream = cu_user_stream();
    size_t sz;
    shoal_status_t s = shoal_allreduce_compressed_stream(comp, buf, buf, SHOAL_SUM, NULL, stream);
    RANK_CHECK(s == SHOAL_OK || s == SHOAL_ERR_PEER, fail, "queueing: %s",
               shoal_status_string(s));
    int queued = s == SHOAL_OK;
    cu_user_sync(stream);
    shoal_status_t async = SHOAL_OK;
    RANK_CHECK(shoal_comm_get_async_error(comm, &async) == SHOAL_OK, fail, "async error");
    RANK_CHECK(async == SHOAL_ERR_PEER || async == SHOAL_ERR_TIMEOUT, fail,
               "rank %d: async error %s after a peer died", rank, shoal_status_string(async));
    RANK_CHECK(shoal_compressor_state_size(comp, &sz) == SHOAL_OK, fail, "state size");
    unsigned char *st = malloc(sz);
    s = shoal_compressor_get_state(comp, st, sz);
    int refused = s == SHOAL_ERR_INVALID_ARG;
    int reset = shoal_compressor_reset(comp) == SHOAL_OK;
    int again = shoal_compressor_get_state(comp, st, sz) == SHOAL_OK;
    free(st);
    /* A call refused at the start queued nothing and lost nothing. */
    RANK_CHECK(queued ? refused : s == SHOAL_OK, fail, "get_state after a call %s: %s",
               queued ? "that failed on its way" : "refused", shoal_status_string(s));
    RANK_CHECK(reset && again, fail, "reset %d, get_state after it %d", reset, again);
    RANK_CHECK(shoal_compressor_destroy(comp) == SHOAL_OK, fail, "destroy");
    cu_user_free(buf);
    cu_user_stream_free(stream);
    shoal_comm_abort(comm);
    return 0;
fail:
    return 1;
}

static void test_peer_dies(void **state)
{
    (void)state;
    static const shoal_compress_kind_t kinds[] = {SHOAL_COMPRESS_INT8, SHOAL_COMPRESS_TERNARY};
    harness_use_transport("shm", TEST_CHUNK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(harness_run_ranks_victim(3, rank_peer_dies, (void *)&kinds[i], 60, 1),
                         0);
}

static void run_all_arg(harness_rank_fn_t fn, const char *transport, int max_ranks, void *arg)
{
    harness_use_transport(transport, TEST_CHUNK);
    int quick = harness_quick();
    const int *ranks = quick ? quick_ranks : all_ranks;
    size_t n = quick ? 2 : 5;
    for (size_t i = 0; i < n; i++) {
        if (ranks[i] <= max_ranks)
            assert_int_equal(harness_run_ranks(ranks[i], fn, arg, 240), 0);
    }
}

static void run_all(harness_rank_fn_t fn, const char *transport, int max_ranks)
{
    run_all_arg(fn, transport, max_ranks, NULL);
}

/* SHOAL_CUDA_PATH=direct: INT8's calls go device to device (the ranks
 * read each other's scratch) with the model's bits; TERNARY's stage. */
static void test_matrix_direct(void **state)
{
    (void)state;
    matrix_arg_t arg = {.devices = 1, .direct = 1};
    harness_setenv("SHOAL_CUDA_PATH", "direct");
    run_all_arg(rank_matrix, "shm", 5, &arg);
    harness_setenv("SHOAL_CUDA_PATH", NULL);
}

/* The same with the ranks on two devices without peer access (stand-in
 * only: SHOAL_STANDIN_NO_P2P): no rank can open its peers' scratch, so
 * every call stages instead, still with the model's bits. */
static void test_direct_fallback(void **state)
{
    (void)state;
    if (!getenv("SHOAL_CUDA_DRIVER"))
        return;
    matrix_arg_t arg = {.devices = 2, .direct = 0};
    harness_use_transport("shm", TEST_CHUNK);
    harness_setenv("SHOAL_CUDA_PATH", "direct");
    harness_setenv("SHOAL_STANDIN_DEVICES", "2");
    harness_setenv("SHOAL_STANDIN_NO_P2P", "1");
    int rc = harness_run_ranks(3, rank_matrix, &arg, 240);
    harness_setenv("SHOAL_STANDIN_NO_P2P", NULL);
    harness_setenv("SHOAL_STANDIN_DEVICES", NULL);
    harness_setenv("SHOAL_CUDA_PATH", NULL);
    assert_int_equal(rc, 0);
}

static void test_matrix_shm(void **state) { (void)state; run_all(rank_matrix, "shm", 8); }
static void test_matrix_tcp(void **state) { (void)state; run_all(rank_matrix, "tcp", 3); }
static void test_state(void **state) { (void)state; run_all(rank_state, "shm", 3); }
static void test_group(void **state) { (void)state; run_all(rank_group, "shm", 5); }
static void test_psgd(void **state) { (void)state; run_all(rank_psgd, "shm", 5); }
static void test_refuse(void **state) { (void)state; run_all(rank_refuse, "shm", 2); }

int main(void)
{
    int rc;
    if (!cu_user_testable(&rc))
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix_shm),
        cmocka_unit_test(test_matrix_tcp),
        cmocka_unit_test(test_matrix_direct),
        cmocka_unit_test(test_direct_fallback),
        cmocka_unit_test(test_state),
        cmocka_unit_test(test_group),
        cmocka_unit_test(test_psgd),
        cmocka_unit_test(test_refuse),
        cmocka_unit_test(test_peer_dies),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
