/* The compressed collectives of sharded training and mixture-of-experts
 * (shoal.h: shoal_allgather_compressed, shoal_reduce_scatter_compressed,
 * shoal_alltoall_compressed) and the majority vote (SHOAL_COMPRESS_MAJORITY),
 * over shared memory and tcp, 1..8 ranks, counts 0, 1, odd and several
 * pipeline pieces, against a scalar reference built in every rank from
 * every rank's input (each rank can compute them all) and the codecs
 * themselves (checked against their definitions in test_codec_*.c):
 *
 * - all-gather (int8 nearest and stochastic, int4; with and without error
 *   feedback; in place and not): every rank's result is bitwise the same
 *   and block r is bitwise decode(encode(rank r's input + its residual)),
 *   the residuals simulated here step after step; the input is untouched;
 *   the decoded weights are within the codec's error of the input;
 * - reduce-scatter (int8, int4, sign; two-shot and ring; SUM and AVG; in
 *   place and not): the two-shot's shard is bitwise its owner's exact
 *   values plus each other rank's decoded contribution, added r-1's first,
 *   times 1/n in fp32 for AVG; for both schedules the residuals summed over
 *   the ranks are the exact sum of the inputs minus the results (error
 *   feedback's identity), the owner's own block keeps no residual, and
 *   int8's error is within bounds;
 * - all-to-all (int8, int4): a block from rank j is bitwise decode(encode(
 *   j's block)), a rank's own block is exact; across two faked hosts, the
 *   blocks between ranks of one host arrive exact and only those across
 *   hosts are encoded;
 * - majority vote: sign(sum of signs) exactly, with zeros and NaN voting 0,
 *   ties giving 0, at 1..8 ranks (4-bit sums up to 7, 8-bit at 8);
 * - info: steps, bytes, ratios above 3 (int8) and 5 (int4) on large calls;
 * - checkpoints: the state after step 0, set into a new compressor,
 *   replays the later steps bit for bit;
 * - refusals: a kind or schedule a collective does not offer, error
 *   feedback where none is kept, a compressor called for another
 *   collective; and a compressed all-gather against a plain one is a
 *   mismatch on both sides. */
#include "harness.h"

#include "api/compressor.h"
#include "base/dtype.h"
#include "compress/codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096
#define STEPS 3
#define SEED 11

typedef struct {
    const char *name;
    shoal_compress_kind_t kind;
    int stochastic;
    shoal_compress_algo_t algo;
    int ef;
} cv_t;

/* Rank r's input value i at step t: random signs, magnitudes that vary by
 * up to 2^8 from block to block. */
static float input(int r, size_t i, int t)
{
    uint32_t h = harness_mix((uint32_t)(r * 1000003 + t * 7919) ^ (uint32_t)i * 2654435761u);
    float mag = ldexpf(1.0f, (int)((i / 50) % 9) - 4);
    return ((float)(h >> 8) / 16777216.0f - 0.5f) * mag;
}

/* The codec a compressor of v runs on rank r at step t (shoal.h: the
 * options' seed mixed with the rank, so that ranks round independently). */
static shoal_codec_t codec_of(const cv_t *v, int r, int t)
{
    const shoal_codec_ops_t *ops = v->kind == SHOAL_COMPRESS_SIGN   ? &shoal_codec_sign
                                   : v->kind == SHOAL_COMPRESS_INT4 ? &shoal_codec_int4
                                                                    : &shoal_codec_int8;
    uint64_t seed = SEED ^ ((uint64_t)r + 1) * 0xd1342543de82ef95ull;
    return (shoal_codec_t){.ops = ops, .block = 64,
                           .round = v->stochastic ? SHOAL_ROUND_STOCHASTIC : SHOAL_ROUND_NEAREST,
                           .seed = seed, .step = (uint64_t)t};
}

static shoal_compressor_t make(shoal_comm_t comm, const cv_t *v, shoal_compress_coll_t coll,
                               size_t count, shoal_dtype_t dt)
{
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, v->kind);
    o.stochastic = v->stochastic;
    o.algo = v->algo;
    o.error_feedback = v->ef;
    o.seed = SEED;
    o.coll = coll;
    shoal_compressor_t c = NULL;
    return shoal_compressor_create(comm, &o, count, dt, NULL, &c) == SHOAL_OK ? c : NULL;
}

static shoal_status_t call(shoal_compressor_t c, shoal_compress_coll_t coll, const void *send,
                           void *recv, shoal_op_t op, shoal_compress_info_t *info, int nb)
{
    shoal_request_t req;
    shoal_status_t s;
    switch (coll) {
    case SHOAL_COMPRESS_COLL_ALLGATHER:
        s = nb ? shoal_iallgather_compressed(c, send, recv, info, &req)
               : shoal_allgather_compressed(c, send, recv, info);
        break;
    case SHOAL_COMPRESS_COLL_REDUCE_SCATTER:
        s = nb ? shoal_ireduce_scatter_compressed(c, send, recv, op, info, &req)
               : shoal_reduce_scatter_compressed(c, send, recv, op, info);
        break;
    case SHOAL_COMPRESS_COLL_ALLTOALL:
        s = nb ? shoal_ialltoall_compressed(c, send, recv, info, &req)
               : shoal_alltoall_compressed(c, send, recv, info);
        break;
    default:
        s = nb ? shoal_iallreduce_compressed(c, send, recv, op, info, &req)
               : shoal_allreduce_compressed(c, send, recv, op, info);
        break;
    }
    return s == SHOAL_OK && nb ? shoal_wait(&req) : s;
}

/* A buffer of n floats (at least one). */
static float *floats(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

/* The checkpoint taken after step 0 into a new compressor: the later steps
 * again, each compared with the results kept in outs. */
typedef struct {
    const cv_t *v;
    shoal_compress_coll_t coll;
    shoal_op_t op;
    size_t count, nin, nout;
    int rank;
    float *outs[STEPS];
} replay_t;

static void fill_input(const replay_t *rp, float *x, int t)
{
    for (size_t i = 0; i < rp->nin; i++)
        x[i] = input(rp->rank, i, t);
}

static int replay(shoal_comm_t comm, const replay_t *rp, const void *state, size_t bytes)
{
    shoal_compressor_t c = make(comm, rp->v, rp->coll, rp->count, SHOAL_FLOAT32);
    float *x = floats(rp->nin), *y = floats(rp->nout);
    RANK_CHECK(c && x && y, fail, "replay: create: %s", shoal_comm_last_error(comm));
    RANK_CHECK(shoal_compressor_set_state(c, state, bytes) == SHOAL_OK, fail, "set_state");
    for (int t = 1; t < STEPS; t++) {
        fill_input(rp, x, t);
        RANK_CHECK(call(c, rp->coll, x, y, rp->op, NULL, 0) == SHOAL_OK, fail, "replay: %s",
                   shoal_comm_last_error(comm));
        RANK_CHECK(!memcmp(y, rp->outs[t], rp->nout * sizeof(float)), fail,
                   "%s: the replay of step %d differs", rp->v->name, t);
    }
    shoal_compressor_destroy(c);
    free(x);
    free(y);
    return 0;
fail:
    return 1;
}

/* ------------------------------------------------------------------ */
/* All-gather */

static int check_allgather(shoal_comm_t comm, int rank, int n, const cv_t *v, size_t count,
                           int in_place)
{
    size_t all = count * (size_t)n;
    shoal_compressor_t c = make(comm, v, SHOAL_COMPRESS_COLL_ALLGATHER, count, SHOAL_FLOAT32);
    RANK_CHECK(c, fail, "%s: create: %s", v->name, shoal_comm_last_error(comm));
    shoal_codec_t c0 = codec_of(v, 0, 0);
    size_t wire = c0.ops->wire_bytes(&c0, count);
    float *x = floats(count), *keep = floats(count), *ref = floats(count);
    float *sim = floats(all); /* every rank's residual, as simulated here */
    unsigned char *w = malloc(wire ? wire : 1);
    replay_t rp = {.v = v, .coll = SHOAL_COMPRESS_COLL_ALLGATHER, .op = SHOAL_SUM,
                   .count = count, .nin = count, .nout = all, .rank = rank};
    for (int t = 0; t < STEPS; t++)
        rp.outs[t] = floats(all);
    size_t state_bytes = 0;
    RANK_CHECK(shoal_compressor_state_size(c, &state_bytes) == SHOAL_OK, fail, "state size");
    void *state = malloc(state_bytes);
    RANK_CHECK(x && keep && ref && sim && w && state, fail, "out of memory");
    for (int t = 0; t < STEPS; t++) {
        float *y = rp.outs[t];
        float *send = in_place ? y + (size_t)rank * count : x;
        for (size_t i = 0; i < count; i++)
            send[i] = keep[i] = input(rank, i, t);
        shoal_compress_info_t info;
        RANK_CHECK(call(c, SHOAL_COMPRESS_COLL_ALLGATHER, send, y, SHOAL_SUM, &info, t == 1) ==
                       SHOAL_OK, fail, "%s count %zu step %d: %s", v->name, count, t,
                   shoal_comm_last_error(comm));
        if (!in_place)
            RANK_CHECK(!memcmp(x, keep, count * sizeof(float)), fail, "the input changed");
        RANK_CHECK(harness_same_bytes(comm, y, all * sizeof(float)), fail,
                   "%s count %zu step %d: ranks differ", v->name, count, t);
        RANK_CHECK(info.step == (uint64_t)t, fail, "info.step");
        if (n > 1 && count >= 60000) {
            double least = v->kind == SHOAL_COMPRESS_INT4 ? 5 : 3;
            RANK_CHECK(info.ratio > least, fail, "%s: ratio %.2f", v->name, info.ratio);
        }
        double err = 0, norm = 0;
        for (int r = 0; r < n; r++) {
            shoal_codec_t cd = codec_of(v, r, t);
            for (size_t i = 0; i < count; i++)
                x[i] = input(r, i, t);
            float *res = v->ef ? sim + (size_t)r * count : NULL;
            cd.ops->encode(&cd, w, x, res, res, count, 0);
            cd.ops->decode(&cd, ref, w, count, 0);
            RANK_CHECK(!memcmp(ref, y + (size_t)r * count, count * sizeof(float)), fail,
                       "%s count %zu step %d: rank %d's block is not the decode of its "
                       "encoding", v->name, count, t, r);
            for (size_t i = 0; i < count; i++) {
                err += (ref[i] - x[i]) * (double)(ref[i] - x[i]);
                norm += (double)x[i] * x[i];
            }
        }
        double bound = v->kind == SHOAL_COMPRESS_INT4 ? 0.15 : 0.02;
        if (t == 0 && norm > 0)
            RANK_CHECK(sqrt(err / norm) < bound, fail, "%s: relative error %g", v->name,
                       sqrt(err / norm));
        if (t == 0)
            RANK_CHECK(shoal_compressor_get_state(c, state, state_bytes) == SHOAL_OK, fail,
                       "get_state");
    }
    if (!in_place && replay(comm, &rp, state, state_bytes))
        goto fail;
    shoal_compressor_destroy(c);
    for (int t = 0; t < STEPS; t++)
        free(rp.outs[t]);
    free(x);
    free(keep);
    free(ref);
    free(sim);
    free(w);
    free(state);
    return 0;
fail:
    return 1;
}

/* ------------------------------------------------------------------ */
/* Reduce-scatter */

/* hosts: the number of faked hosts (1: none); across several, AUTO runs
 * the hierarchy's (host sums in fp32, quantised once between hosts). */
static int check_reduce_scatter(shoal_comm_t comm, int rank, int n, const cv_t *v, size_t count,
                                shoal_op_t op, int in_place, int hosts)
{
    size_t all = count * (size_t)n;
    shoal_compressor_t c = make(comm, v, SHOAL_COMPRESS_COLL_REDUCE_SCATTER, count,
                                SHOAL_FLOAT32);
    RANK_CHECK(c, fail, "%s: create: %s", v->name, shoal_comm_last_error(comm));
    shoal_codec_t c0 = codec_of(v, 0, 0);
    size_t wire = c0.ops->wire_bytes(&c0, count);
    int hier = hosts > 1 && v->algo == SHOAL_COMPRESS_ALGO_AUTO;
    int two_shot = v->algo != SHOAL_COMPRESS_ALGO_RING && !hier;
    float *x = floats(all), *y = floats(count), *acc = floats(count), *dec = floats(count);
    float *sim = floats(all * (size_t)n), *xr = floats(count), *gathered = floats(all);
    double *sum_in = calloc(all + 1, sizeof(double)), *sum_out = calloc(all + 1, 8);
    double *mag = calloc(all + 1, sizeof(double)), *res_all = calloc(all + 1, 8);
    unsigned char *w = malloc(wire ? wire : 1);
    replay_t rp = {.v = v, .coll = SHOAL_COMPRESS_COLL_REDUCE_SCATTER, .op = op,
                   .count = count, .nin = all, .nout = count, .rank = rank};
    for (int t = 0; t < STEPS; t++)
        rp.outs[t] = floats(count);
    size_t state_bytes = 0;
    RANK_CHECK(shoal_compressor_state_size(c, &state_bytes) == SHOAL_OK, fail, "state size");
    void *state = malloc(state_bytes);
    RANK_CHECK(x && y && acc && dec && sim && xr && gathered && sum_in && sum_out && mag &&
                   res_all && w && state, fail, "out of memory");
    float inv = 1.0f / (float)n;
    for (int t = 0; t < STEPS; t++) {
        fill_input(&rp, x, t);
        float *out = in_place ? x + (size_t)rank * count : y;
        shoal_compress_info_t info;
        RANK_CHECK(call(c, SHOAL_COMPRESS_COLL_REDUCE_SCATTER, x, out, op, &info, t == 2) ==
                       SHOAL_OK, fail, "%s count %zu step %d: %s", v->name, count, t,
                   shoal_comm_last_error(comm));
        memcpy(rp.outs[t], out, count * sizeof(float));
        if (n > 1 && count >= 60000 && v->kind != SHOAL_COMPRESS_SIGN && hosts == 1) {
            double least = v->kind == SHOAL_COMPRESS_INT4 ? 5 : 3;
            RANK_CHECK(info.ratio > least, fail, "%s: ratio %.2f", v->name, info.ratio);
        }
        /* The two-shot's shard: this rank's exact values (plus its
         * residual), then the decoded contributions of ranks me-1, me-2,
         * ..., each rank's residual simulated for every block it sends. */
        for (int r = 0; r < n; r++) {
            for (int j = 0; j < n; j++) {
                float *res = sim + ((size_t)r * n + (size_t)j) * count;
                for (size_t i = 0; i < count; i++)
                    xr[i] = input(r, (size_t)j * count + i, t);
                if (j == r) {
                    if (j == rank) {
                        for (size_t i = 0; i < count; i++)
                            acc[i] = v->ef ? xr[i] + res[i] : xr[i];
                    }
                    memset(res, 0, count * sizeof(float));
                    continue;
                }
                shoal_codec_t cd = codec_of(v, r, t);
                cd.ops->encode(&cd, w, xr, v->ef ? res : NULL, v->ef ? res : NULL, count,
                               (size_t)j * count);
                if (j == rank) {
                    cd.ops->decode(&cd, dec, w, count, (size_t)j * count);
                    /* Kept per sender, added below in the fixed order. */
                    memcpy(gathered + (size_t)r * count, dec, count * sizeof(float));
                }
            }
        }
        for (int k = 1; k < n; k++) {
            const float *d = gathered + (size_t)((rank - k + n) % n) * count;
            for (size_t i = 0; i < count; i++)
                acc[i] = d[i] + acc[i];
        }
        if (op == SHOAL_AVG && n > 1)
            for (size_t i = 0; i < count; i++)
                acc[i] = acc[i] * inv;
        if (two_shot)
            RANK_CHECK(!memcmp(acc, out, count * sizeof(float)), fail,
                       "%s count %zu step %d: the shard differs from the reference", v->name,
                       count, t);
        /* Error feedback's identity, over every value of the n blocks. */
        if (count)
            RANK_CHECK(shoal_allgather(out, gathered, count, SHOAL_FLOAT32, comm) == SHOAL_OK,
                       fail, "allgather");
        double err = 0, norm = 0;
        for (size_t g = 0; g < all; g++) {
            double e = 0;
            for (int r = 0; r < n; r++) {
                e += input(r, g, t);
                mag[g] += fabs(input(r, g, t));
            }
            double got = op == SHOAL_AVG ? (double)gathered[g] * n : gathered[g];
            sum_in[g] += e;
            sum_out[g] += got;
            mag[g] += fabs(got);
            err += (got - e) * (got - e);
            norm += e * e;
        }
        if (t == 0 && v->kind == SHOAL_COMPRESS_INT8 && norm > 0)
            RANK_CHECK(sqrt(err / norm) < (two_shot || hier ? 0.02 : 0.05), fail,
                       "%s: relative error %g", v->name, sqrt(err / norm));
        if (n == 1)
            RANK_CHECK(err == 0, fail, "one rank must return its input exactly");
        if (t == 0)
            RANK_CHECK(shoal_compressor_get_state(c, state, state_bytes) == SHOAL_OK, fail,
                       "get_state");
    }
    if (v->ef) {
        const float *res = NULL;
        RANK_CHECK(shoal_compressor_residual(c, &res) == SHOAL_OK && res, fail, "residual");
        for (size_t i = 0; i < count; i++)
            RANK_CHECK(res[(size_t)rank * count + i] == 0.0f, fail,
                       "the owner's own block keeps a residual");
        /* Across hosts the values for the ranks of this host travel in
         * full precision: none of their blocks keeps a residual here. */
        int my_host = (int)((long)rank * hosts / n);
        for (int r = 0; hier && r < n; r++)
            for (size_t i = 0; i < count && (int)((long)r * hosts / n) == my_host; i++)
                RANK_CHECK(res[(size_t)r * count + i] == 0.0f, fail,
                           "%s: value %zu for rank %d of this host keeps a residual", v->name,
                           i, r);
        for (size_t g = 0; g < all; g++)
            res_all[g] = res[g];
        if (all)
            RANK_CHECK(shoal_allreduce(res_all, res_all, all, SHOAL_FLOAT64, SHOAL_SUM, comm) ==
                           SHOAL_OK, fail, "residual sum");
        double most = 0;
        for (size_t g = 0; g < all; g++)
            most = mag[g] > most ? mag[g] : most;
        for (size_t g = 0; g < all; g++) {
            double gap = fabs(sum_in[g] - sum_out[g] - res_all[g]);
            RANK_CHECK(gap <= 4e-6 * most * n + 1e-30, fail,
                       "%s count %zu value %zu: inputs %g - results %g != residuals %g",
                       v->name, count, g, sum_in[g], sum_out[g], res_all[g]);
        }
    }
    if (!in_place && replay(comm, &rp, state, state_bytes))
        goto fail;
    shoal_compressor_destroy(c);
    for (int t = 0; t < STEPS; t++)
        free(rp.outs[t]);
    free(x);
    free(y);
    free(acc);
    free(dec);
    free(sim);
    free(xr);
    free(gathered);
    free(sum_in);
    free(sum_out);
    free(mag);
    free(res_all);
    free(w);
    free(state);
    return 0;
fail:
    return 1;
}

/* ------------------------------------------------------------------ */
/* All-to-all */

/* hosts: the number of faked hosts (1: none), as harness_split_hosts puts
 * the ranks. */
static int check_alltoall(shoal_comm_t comm, int rank, int n, const cv_t *v, size_t count,
                          int in_place, int hosts)
{
    size_t all = count * (size_t)n;
    shoal_compressor_t c = make(comm, v, SHOAL_COMPRESS_COLL_ALLTOALL, count, SHOAL_FLOAT32);
    RANK_CHECK(c, fail, "%s: create: %s", v->name, shoal_comm_last_error(comm));
    shoal_codec_t c0 = codec_of(v, 0, 0);
    size_t wire = c0.ops->wire_bytes(&c0, count);
    float *x = floats(all), *y = floats(all), *xr = floats(count), *ref = floats(count);
    unsigned char *w = malloc(wire ? wire : 1);
    RANK_CHECK(x && y && xr && ref && w, fail, "out of memory");
    int my_host = (int)((long)rank * hosts / n);
    for (int t = 0; t < STEPS; t++) {
        for (size_t i = 0; i < all; i++)
            x[i] = input(rank, i, t);
        float *out = in_place ? x : y;
        shoal_compress_info_t info;
        RANK_CHECK(call(c, SHOAL_COMPRESS_COLL_ALLTOALL, x, out, SHOAL_SUM, &info, t == 1) ==
                       SHOAL_OK, fail, "%s count %zu step %d: %s", v->name, count, t,
                   shoal_comm_last_error(comm));
        if (n > 1 && count >= 60000 && hosts == 1) {
            double least = v->kind == SHOAL_COMPRESS_INT4 ? 5 : 3;
            RANK_CHECK(info.ratio > least, fail, "%s: ratio %.2f", v->name, info.ratio);
        }
        for (int j = 0; j < n; j++) {
            for (size_t i = 0; i < count; i++)
                xr[i] = input(j, (size_t)rank * count + i, t);
            int same_host = (int)((long)j * hosts / n) == my_host;
            if (j == rank || (hosts > 1 && same_host)) {
                memcpy(ref, xr, count * sizeof(float));
            } else {
                shoal_codec_t cd = codec_of(v, j, t);
                cd.ops->encode(&cd, w, xr, NULL, NULL, count, (size_t)rank * count);
                cd.ops->decode(&cd, ref, w, count, (size_t)rank * count);
            }
            RANK_CHECK(!memcmp(ref, out + (size_t)j * count, count * sizeof(float)), fail,
                       "%s count %zu step %d: the block from rank %d differs (%s)", v->name,
                       count, t, j, j == rank ? "own" : same_host && hosts > 1 ? "same host"
                                                                            : "encoded");
        }
    }
    shoal_compressor_destroy(c);
    free(x);
    free(y);
    free(xr);
    free(ref);
    free(w);
    return 0;
fail:
    return 1;
}

/* ------------------------------------------------------------------ */
/* Majority vote */

/* Rank r's vote input: zeros at every 17th value, NaN on rank 0 at every
 * 29th. */
static float vote_input(int r, size_t i, int t)
{
    if (i % 17 == 0)
        return 0.0f;
    if (i % 29 == 0 && r == 0)
        return NAN;
    return input(r, i, t);
}

static int check_vote(shoal_comm_t comm, int rank, int n, size_t count, shoal_dtype_t dt)
{
    const cv_t v = {"majority", SHOAL_COMPRESS_MAJORITY, 0, SHOAL_COMPRESS_ALGO_AUTO, 0};
    shoal_compressor_t c = make(comm, &v, SHOAL_COMPRESS_COLL_ALLREDUCE, count, dt);
    RANK_CHECK(c, fail, "majority: create: %s", shoal_comm_last_error(comm));
    size_t es = dt == SHOAL_FLOAT32 ? 4 : 2;
    unsigned char *x = malloc(count * es + 1), *y = malloc(count * es + 1);
    RANK_CHECK(x && y, fail, "out of memory");
    int ties = 0;
    for (int t = 0; t < STEPS; t++) {
        for (size_t i = 0; i < count; i++)
            shoal_dtype_set_f64(x, i, dt, vote_input(rank, i, t));
        shoal_compress_info_t info;
        RANK_CHECK(call(c, SHOAL_COMPRESS_COLL_ALLREDUCE, x, t == 1 ? x : y,
                        t == 2 ? SHOAL_AVG : SHOAL_SUM, &info, t == 2) == SHOAL_OK, fail,
                   "majority count %zu: %s", count, shoal_comm_last_error(comm));
        const unsigned char *out = t == 1 ? x : y;
        RANK_CHECK(harness_same_bytes(comm, out, count * es), fail, "ranks differ");
        for (size_t i = 0; i < count; i++) {
            int sum = 0;
            for (int r = 0; r < n; r++) {
                float f = vote_input(r, i, t);
                if (dt == SHOAL_FLOAT16) {
                    uint16_t h;
                    shoal_dtype_set_f64(&h, 0, dt, f);
                    f = shoal_f16_to_f32(h);
                } else if (dt == SHOAL_BFLOAT16) {
                    uint16_t h;
                    shoal_dtype_set_f64(&h, 0, dt, f);
                    f = shoal_bf16_to_f32(h);
                }
                sum += f > 0 ? 1 : f < 0 ? -1 : 0;
            }
            ties += sum == 0;
            double want = sum > 0 ? 1 : sum < 0 ? -1 : 0;
            double got = dt == SHOAL_FLOAT32   ? ((const float *)out)[i]
                         : dt == SHOAL_FLOAT16 ? shoal_f16_to_f32(((const uint16_t *)out)[i])
                                               : shoal_bf16_to_f32(((const uint16_t *)out)[i]);
            RANK_CHECK(got == want, fail, "majority count %zu value %zu: %g, not %g", count, i,
                       got, want);
        }
        if (n > 1 && count >= 60000)
            RANK_CHECK(info.ratio > (n <= 7 ? 6 : 3), fail, "majority: ratio %.2f", info.ratio);
    }
    if (count > 100)
        RANK_CHECK(ties > 0, fail, "no tie was checked");
    shoal_compressor_destroy(c);
    free(x);
    free(y);
    return 0;
fail:
    return 1;
}

/* ------------------------------------------------------------------ */

static const size_t counts[] = {0, 1, 65, 1001, 3 * 3616 + 77};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static const cv_t ag_variants[] = {
    {"ag int8", SHOAL_COMPRESS_INT8, 0, SHOAL_COMPRESS_ALGO_AUTO, 1},
    {"ag int8 stochastic no-ef", SHOAL_COMPRESS_INT8, 1, SHOAL_COMPRESS_ALGO_AUTO, 0},
    {"ag int4", SHOAL_COMPRESS_INT4, 0, SHOAL_COMPRESS_ALGO_AUTO, 1},
};
static const cv_t rs_variants[] = {
    {"rs int8 two-shot", SHOAL_COMPRESS_INT8, 0, SHOAL_COMPRESS_ALGO_AUTO, 1},
    {"rs int8 ring", SHOAL_COMPRESS_INT8, 1, SHOAL_COMPRESS_ALGO_RING, 1},
    {"rs int4 two-shot", SHOAL_COMPRESS_INT4, 1, SHOAL_COMPRESS_ALGO_TWO_SHOT, 1},
    {"rs sign", SHOAL_COMPRESS_SIGN, 0, SHOAL_COMPRESS_ALGO_AUTO, 1},
    {"rs int8 no-ef", SHOAL_COMPRESS_INT8, 0, SHOAL_COMPRESS_ALGO_AUTO, 0},
};
static const cv_t a2a_variants[] = {
    {"a2a int8", SHOAL_COMPRESS_INT8, 0, SHOAL_COMPRESS_ALGO_AUTO, 0},
    {"a2a int4 stochastic", SHOAL_COMPRESS_INT4, 1, SHOAL_COMPRESS_ALGO_AUTO, 0},
};
#define NV(a) (sizeof(a) / sizeof(a[0]))

static int rank_matrix(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    for (size_t k = 0; k < NCOUNTS; k++) {
        size_t count = counts[k];
        int in_place = k % 2;
        for (size_t v = 0; v < NV(ag_variants); v++)
            if (check_allgather(comm, rank, n, &ag_variants[v], count, in_place))
                goto fail;
        for (size_t v = 0; v < NV(rs_variants); v++)
            if (check_reduce_scatter(comm, rank, n, &rs_variants[v], count,
                                     (k + v) % 2 ? SHOAL_AVG : SHOAL_SUM, in_place, 1))
                goto fail;
        for (size_t v = 0; v < NV(a2a_variants); v++)
            if (check_alltoall(comm, rank, n, &a2a_variants[v], count, in_place, 1))
                goto fail;
        if (check_vote(comm, rank, n, count, SHOAL_FLOAT32))
            goto fail;
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_matrix(const char *transport, int nranks)
{
    if (!harness_ranks_wanted(nranks))
        return;
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(nranks, rank_matrix, NULL, 600), 0);
}

#define MATRIX_TEST(tl, n)                                                    \
    static void test_##tl##_##n(void **state)                                 \
    {                                                                         \
        (void)state;                                                          \
        run_matrix(#tl, n);                                                   \
    }
MATRIX_TEST(shm, 1) MATRIX_TEST(shm, 2) MATRIX_TEST(shm, 3) MATRIX_TEST(shm, 4)
MATRIX_TEST(shm, 5) MATRIX_TEST(shm, 6) MATRIX_TEST(shm, 7) MATRIX_TEST(shm, 8)
MATRIX_TEST(tcp, 2) MATRIX_TEST(tcp, 3) MATRIX_TEST(tcp, 5)

/* Large calls (ratios), float16 and bfloat16 buffers, and the all-to-all
 * across two faked hosts. */
static int rank_large(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    int hosts = *(const int *)arg;
    if (hosts > 1)
        harness_split_hosts(rank, n, hosts);
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = 70001;
    if (hosts > 1) {
        for (size_t v = 0; v < NV(a2a_variants); v++)
            if (check_alltoall(comm, rank, n, &a2a_variants[v], 1001, v % 2, hosts))
                goto fail;
    } else {
        if (check_allgather(comm, rank, n, &ag_variants[2], count, 0) ||
            check_reduce_scatter(comm, rank, n, &rs_variants[0], count, SHOAL_SUM, 0, 1) ||
            check_alltoall(comm, rank, n, &a2a_variants[0], count, 0, 1) ||
            check_vote(comm, rank, n, count, SHOAL_FLOAT32) ||
            check_vote(comm, rank, n, 1001, SHOAL_FLOAT16) ||
            check_vote(comm, rank, n, 1001, SHOAL_BFLOAT16))
            goto fail;
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_large(void **state)
{
    (void)state;
    int hosts = 1;
    harness_use_transport("shm", 0);
    assert_int_equal(harness_run_ranks(4, rank_large, &hosts, 600), 0);
}

static void test_two_hosts(void **state)
{
    (void)state;
    int hosts = 2;
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(4, rank_large, &hosts, 600), 0);
}

/* The reduce-scatter (the hierarchy's under AUTO) and the all-gather (its
 * wire gathered as bytes, where the hierarchy runs) across faked hosts, on
 * layout (arg: ranks, hosts, pipeline pieces; 0 pieces: the cost model's):
 * every variant, counts 0, 1, odd and several pieces, SUM and AVG, in
 * place and not. */
static const cv_t rs_host_variants[] = {
    {"rs int8 across hosts", SHOAL_COMPRESS_INT8, 0, SHOAL_COMPRESS_ALGO_AUTO, 1},
    {"rs int4 stochastic across hosts", SHOAL_COMPRESS_INT4, 1, SHOAL_COMPRESS_ALGO_AUTO, 1},
    {"rs sign across hosts", SHOAL_COMPRESS_SIGN, 0, SHOAL_COMPRESS_ALGO_AUTO, 1},
    {"rs int8 no-ef across hosts", SHOAL_COMPRESS_INT8, 0, SHOAL_COMPRESS_ALGO_AUTO, 0},
    {"rs int8 two-shot across hosts", SHOAL_COMPRESS_INT8, 0, SHOAL_COMPRESS_ALGO_TWO_SHOT, 1},
};

static int rank_hosts(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    const int *layout = arg;
    harness_split_hosts(rank, n, layout[1]);
    if (layout[2]) {
        char text[16];
        snprintf(text, sizeof(text), "%d", layout[2]);
        harness_setenv("SHOAL_HIER_PIPE", text);
    }
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    static const size_t rs_counts[] = {0, 1, 1001, 3 * 3616 + 77};
    for (size_t k = 0; k < sizeof(rs_counts) / sizeof(rs_counts[0]); k++) {
        for (size_t v = 0; v < NV(rs_host_variants); v++)
            if (check_reduce_scatter(comm, rank, n, &rs_host_variants[v], rs_counts[k],
                                     (k + v) % 2 ? SHOAL_AVG : SHOAL_SUM, (k + v) % 3 == 0,
                                     layout[1]))
                goto fail;
        for (size_t v = 0; v < NV(ag_variants); v++)
            if (check_allgather(comm, rank, n, &ag_variants[v], rs_counts[k], (k + v) % 2))
                goto fail;
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_hosts(void **state)
{
    (void)state;
    static const int layouts[][3] = {{4, 2, 0}, {5, 2, 3}, {7, 3, 0}, {6, 3, 2}};
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
        if (!harness_ranks_wanted(layouts[i][0]))
            continue;
        harness_use_transport("tcp", TEST_CHUNK);
        assert_int_equal(harness_run_ranks(layouts[i][0], rank_hosts, (void *)layouts[i],
                                           600),
                         0);
    }
}

/* float16 all-gather and reduce-scatter: the codec runs on the widened
 * values, and the results are narrowed once. */
static int rank_half(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = 1001, all = count * (size_t)n;
    uint16_t *h = malloc(all * 2), *o = malloc(all * 2);
    RANK_CHECK(h && o, fail, "out of memory");
    for (int rs = 0; rs < 2; rs++) {
        const cv_t *v = rs ? &rs_variants[0] : &ag_variants[0];
        shoal_compress_coll_t coll = rs ? SHOAL_COMPRESS_COLL_REDUCE_SCATTER
                                        : SHOAL_COMPRESS_COLL_ALLGATHER;
        shoal_compressor_t c = make(comm, v, coll, count, SHOAL_FLOAT16);
        RANK_CHECK(c, fail, "create: %s", shoal_comm_last_error(comm));
        size_t nin = rs ? all : count;
        for (size_t i = 0; i < nin; i++)
            shoal_dtype_set_f64(h, i, SHOAL_FLOAT16, input(rank, i, 0));
        RANK_CHECK(call(c, coll, h, o, SHOAL_SUM, NULL, 0) == SHOAL_OK, fail, "%s",
                   shoal_comm_last_error(comm));
        double err = 0, norm = 0;
        size_t nout = rs ? count : all;
        for (size_t i = 0; i < nout; i++) {
            double e = 0;
            for (int r = 0; r < n; r++) {
                if (!rs && (size_t)r != i / count)
                    continue;
                size_t at = rs ? (size_t)rank * count + i : i % count;
                uint16_t one;
                shoal_dtype_set_f64(&one, 0, SHOAL_FLOAT16, input(r, at, 0));
                e += shoal_f16_to_f32(one);
            }
            double got = shoal_f16_to_f32(o[i]);
            err += (got - e) * (got - e);
            norm += e * e;
        }
        RANK_CHECK(sqrt(err / norm) < 0.02, fail, "%s float16: relative error %g", v->name,
                   sqrt(err / norm));
        shoal_compressor_destroy(c);
    }
    free(h);
    free(o);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_half(void **state)
{
    (void)state;
    harness_use_transport("shm", 0);
    assert_int_equal(harness_run_ranks(3, rank_half, NULL, 300), 0);
}

/* ------------------------------------------------------------------ */
/* Refusals and a mismatch */

static int refused(shoal_comm_t comm, shoal_compress_kind_t kind, shoal_compress_coll_t coll,
                   shoal_compress_algo_t algo, int ef)
{
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, kind);
    o.coll = coll;
    o.algo = algo;
    o.error_feedback = ef;
    shoal_compressor_t c = NULL;
    return shoal_compressor_create(comm, &o, 64, SHOAL_FLOAT32, NULL, &c) ==
               SHOAL_ERR_INVALID_ARG && !c;
}

static int rank_refusals(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_TERNARY, SHOAL_COMPRESS_COLL_ALLGATHER,
                       SHOAL_COMPRESS_ALGO_AUTO, 1), fail, "ternary all-gather");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_SIGN, SHOAL_COMPRESS_COLL_ALLGATHER,
                       SHOAL_COMPRESS_ALGO_AUTO, 1), fail, "sign all-gather");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_POWERSGD, SHOAL_COMPRESS_COLL_REDUCE_SCATTER,
                       SHOAL_COMPRESS_ALGO_AUTO, 1), fail, "powersgd reduce-scatter");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_INT8, SHOAL_COMPRESS_COLL_REDUCE_SCATTER,
                       SHOAL_COMPRESS_ALGO_TREE, 1), fail, "tree reduce-scatter");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_INT8, SHOAL_COMPRESS_COLL_ALLTOALL,
                       SHOAL_COMPRESS_ALGO_AUTO, 1), fail, "all-to-all with error feedback");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_MAJORITY, SHOAL_COMPRESS_COLL_ALLREDUCE,
                       SHOAL_COMPRESS_ALGO_AUTO, 1), fail, "majority with error feedback");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_SIGN, SHOAL_COMPRESS_COLL_ALLREDUCE,
                       SHOAL_COMPRESS_ALGO_RING, 1), fail, "sign on the ring");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_INT4, SHOAL_COMPRESS_COLL_ALLREDUCE,
                       SHOAL_COMPRESS_ALGO_TREE, 1), fail, "int4 on the tree");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_INT8, SHOAL_COMPRESS_COLL_ALLGATHER,
                       SHOAL_COMPRESS_ALGO_TREE, 1), fail, "a schedule for the all-gather");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_INT8, SHOAL_COMPRESS_COLL_ALLTOALL,
                       SHOAL_COMPRESS_ALGO_RING, 0), fail, "a schedule for the all-to-all");
    RANK_CHECK(refused(comm, SHOAL_COMPRESS_INT8, (shoal_compress_coll_t)9,
                       SHOAL_COMPRESS_ALGO_AUTO, 1), fail, "an unknown collective");
    /* A compressor of one collective called for another. */
    const cv_t *v = &ag_variants[0];
    shoal_compressor_t c = make(comm, v, SHOAL_COMPRESS_COLL_ALLGATHER, 64, SHOAL_FLOAT32);
    RANK_CHECK(c, fail, "create");
    float x[64 * 8] = {0}, y[64 * 8];
    RANK_CHECK(shoal_allreduce_compressed(c, x, y, SHOAL_SUM, NULL) == SHOAL_ERR_INVALID_ARG,
               fail, "an all-gather compressor ran an all-reduce");
    RANK_CHECK(strstr(shoal_comm_last_error(comm), "serves the all-gather"), fail,
               "message: %s", shoal_comm_last_error(comm));
    RANK_CHECK(shoal_allgather_compressed(c, x, y, NULL) == SHOAL_OK, fail,
               "the communicator is still usable: %s", shoal_comm_last_error(comm));
    /* A compressed all-gather on rank 0 against a plain one of as many
     * bytes elsewhere: both sides fail, naming the mismatch. */
    if (n > 1) {
        shoal_codec_t cd = codec_of(v, 0, 0);
        size_t wire = cd.ops->wire_bytes(&cd, 64);
        unsigned char b[1024] = {0}, rb[1024 * 8];
        shoal_status_t s = rank == 0 ? shoal_allgather_compressed(c, x, y, NULL)
                                     : shoal_allgather(b, rb, wire, SHOAL_UINT8, comm);
        RANK_CHECK(s != SHOAL_OK, fail, "a compressed all-gather met a plain one");
    }
    shoal_compressor_destroy(c);
    shoal_comm_destroy(comm);
    return 0;
fail:
    return 1;
}

static void test_refusals(void **state)
{
    (void)state;
    harness_use_transport("shm", 0);
    setenv("SHOAL_TIMEOUT", "5", 1);
    assert_int_equal(harness_run_ranks(2, rank_refusals, NULL, 120), 0);
    unsetenv("SHOAL_TIMEOUT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_1), cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3), cmocka_unit_test(test_shm_4),
        cmocka_unit_test(test_shm_5), cmocka_unit_test(test_shm_6),
        cmocka_unit_test(test_shm_7), cmocka_unit_test(test_shm_8),
        cmocka_unit_test(test_tcp_2), cmocka_unit_test(test_tcp_3),
        cmocka_unit_test(test_tcp_5), cmocka_unit_test(test_large),
        cmocka_unit_test(test_two_hosts), cmocka_unit_test(test_hosts),
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
