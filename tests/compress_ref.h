/* The reference check of a compressed all-reduce (core/compress_call.h),
 * shared by the tests of its schedules: inside a rank, one codec and count
 * through shoal_allreduce_codec, checked against a double reference built
 * from every rank's input (each rank can compute every input).
 *
 * - every rank's result, and its in-place twin, is bitwise the same;
 * - the result is within the schedule's error bound of the exact sum;
 * - the residuals, summed over the ranks, are the exact sum minus the
 *   result, up to fp32 rounding (tolerance 4 n A 2^-24), and exactly 0 on
 *   a single rank;
 * - AVG is the SUM result times 1/n in fp32, bit for bit;
 * - error feedback fused (shoal_allreduce_codec_ef, with a last residual
 *   that differs by rank): the result and the new residual are bitwise
 *   those of the unfused path, shoal_allreduce_codec on the fp32 sums
 *   input + last residual, with the residual apart and in place; summed
 *   over the ranks, inputs + last residuals == result + new residuals up
 *   to fp32 rounding (the error-feedback identity); the ternary codec's
 *   scales of the sums come from shoal_codec_block_absmax_sum, bitwise
 *   block_absmax of the summed array.
 *
 * Error bounds, per value, with A = the sum over ranks of the largest
 * |input| of the value's codec block, f = 1/2 for nearest rounding and 1
 * for stochastic, and s = the ternary codec's shared scale of the block:
 * - int8 ring: each of the n quantisations of a partial sum errs by at
 *   most its block's scale, amax / 127 of a partial sum whose magnitude is
 *   at most A plus the errors so far (at most n / 127 of A):
 *   n * 1.1 * A / 127;
 * - int8 two-shot: n - 1 contributions quantised once each (f amax_r /
 *   127) and the sum once (f (A + A f / 127) / 127): f * 2.1 * A / 127;
 * - int8 tree: each rank quantises its subtree's partial sum once (f of
 *   its block's amax / 127), and each rank's input lies in the subtrees of
 *   at most L = ceil(log2(n + 1)) ranks (the heap's levels), so the errors
 *   add up to at most f L A / 127, plus the errors carried into the
 *   partials (at most L / 127 of A): f * L * 1.1 * A / 127;
 * - int8 hierarchical over H hosts: the ring over the host sums, whose
 *   block maxima add up to at most A: H * 1.1 * A / 127;
 * - ternary ring: n codes, each within f s of a value no larger than s:
 *   n * f * s (times 1.01 for the fp32 product of the code sum and s);
 * - ternary hierarchical: a host's sum S may exceed s (the scales are the
 *   ranks' maxima), and encodes clipped to +-s: within max(f s, |S| - s),
 *   at most (ranks of the host) * s; over the hosts n * s (times 1.01).
 *
 * The helpers are static inline so that each test takes only what it
 * uses. */
#ifndef SHOAL_TEST_COMPRESS_REF_H
#define SHOAL_TEST_COMPRESS_REF_H

#include "harness.h"

#include "algos/reduce.h"
#include "compress/codec.h"
#include "core/compress_call.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The schedule a check expects, for its error bound. */
typedef enum { CREF_RING, CREF_TWO_SHOT, CREF_HIER, CREF_TREE } cref_sched_t;

/* Rank r's input value i: random signs and magnitudes that vary from
 * block to block by up to 2^12, so that scales differ. */
static inline float cref_input(int r, size_t i)
{
    uint32_t h = harness_mix((uint32_t)(r * 1000003) ^ (uint32_t)i * 2654435761u);
    float mag = ldexpf(1.0f, (int)((i / 40) % 13) - 6);
    return ((float)(h >> 8) / 16777216.0f - 0.5f) * mag;
}

typedef struct {
    size_t count, cap;
    int nranks;
    float *x, *y, *y2, *res, *all_res;
    float *scales, *rank_scales; /* ternary: shared scales; one rank's maxima */
    float *old, *xe, *res2, *scales_ef; /* error feedback: last residual, input + it */
    double *exact, *absmax;
} cref_bufs_t;

static inline int cref_alloc(cref_bufs_t *b, size_t cap, int nranks)
{
    memset(b, 0, sizeof(*b));
    cap = cap ? cap : 1;
    b->cap = cap;
    b->nranks = nranks;
    b->x = malloc(cap * sizeof(float));
    b->y = malloc(cap * sizeof(float));
    b->y2 = malloc(cap * sizeof(float));
    b->res = malloc(cap * sizeof(float));
    b->all_res = malloc(cap * (size_t)nranks * sizeof(float));
    b->scales = malloc((cap / 32 + 1) * sizeof(float));
    b->rank_scales = malloc((cap / 32 + 1) * sizeof(float));
    b->exact = malloc(cap * sizeof(double));
    b->absmax = malloc(cap * sizeof(double));
    b->old = malloc(cap * sizeof(float));
    b->xe = malloc(cap * sizeof(float));
    b->res2 = malloc(cap * sizeof(float));
    b->scales_ef = malloc((cap / 32 + 1) * sizeof(float));
    return b->x && b->y && b->y2 && b->res && b->all_res && b->scales && b->rank_scales &&
           b->exact && b->absmax && b->old && b->xe && b->res2 && b->scales_ef;
}

static inline void cref_free(cref_bufs_t *b)
{
    free(b->x);
    free(b->y);
    free(b->y2);
    free(b->res);
    free(b->all_res);
    free(b->scales);
    free(b->rank_scales);
    free(b->exact);
    free(b->absmax);
    free(b->old);
    free(b->xe);
    free(b->res2);
    free(b->scales_ef);
}

/* Rank r's last residual of value i in the error-feedback check: a
 * quarter of another input, so that it differs by rank and block. */
static inline float cref_old(int r, size_t i)
{
    return 0.25f * cref_input(r + 101, i);
}

/* The error-feedback part of cref_check (see the header): c as given
 * there, its ternary scales replaced by those of the sums. Uses b->y2,
 * b->y as scratch once cref_check is done with them. */
static inline int cref_check_ef(shoal_comm_t comm, int rank, cref_bufs_t *b,
                                const shoal_codec_t *c0, shoal_compress_algo_t algo)
{
    size_t count = b->count, block = c0->block, nb = (count + block - 1) / block;
    int nranks = b->nranks;
    shoal_codec_t c = *c0;
    if (c.ops == &shoal_codec_ternary) {
        /* The shared scales of the sums: each rank's maxima of x + old,
         * fused, against those of the summed array, then the max. */
        for (size_t k = 0; k < nb; k++)
            b->scales_ef[k] = 0;
        for (int r = 0; r < nranks; r++) {
            for (size_t i = 0; i < count; i++) {
                b->y[i] = cref_input(r, i);
                b->old[i] = cref_old(r, i);
                b->xe[i] = b->y[i] + b->old[i];
            }
            shoal_codec_block_absmax_sum(b->rank_scales, b->y, b->old, count, block);
            shoal_codec_block_absmax(b->y2, b->xe, count, block);
            RANK_CHECK(!memcmp(b->rank_scales, b->y2, nb * sizeof(float)), fail,
                       "block_absmax_sum differs from block_absmax of the sum (count %zu)",
                       count);
            for (size_t k = 0; k < nb; k++)
                b->scales_ef[k] =
                    b->rank_scales[k] > b->scales_ef[k] ? b->rank_scales[k] : b->scales_ef[k];
        }
        c.scales = b->scales_ef;
    }
    for (size_t i = 0; i < count; i++) {
        b->x[i] = cref_input(rank, i);
        b->old[i] = cref_old(rank, i);
        b->xe[i] = b->x[i] + b->old[i];
    }
    /* The unfused path: the sums, then the codec. */
    shoal_status_t s = shoal_allreduce_codec(comm, b->xe, b->y, count, SHOAL_FLOAT32,
                                             SHOAL_SUM, &c, b->res, algo);
    RANK_CHECK(s == SHOAL_OK, fail, "unfused: %s", shoal_status_string(s));
    /* Fused, the residual apart. */
    for (size_t i = 0; i < count; i++)
        b->res2[i] = NAN;
    s = shoal_allreduce_codec_ef(comm, b->x, b->y2, count, SHOAL_FLOAT32, SHOAL_SUM, &c, b->old,
                                 b->res2, algo);
    RANK_CHECK(s == SHOAL_OK, fail, "fused: %s", shoal_status_string(s));
    RANK_CHECK(!memcmp(b->y, b->y2, count * sizeof(float)), fail,
               "rank %d/%d %s count %zu block %zu: fused error feedback's result differs from "
               "the unfused one", rank, nranks, c.ops->name, count, block);
    RANK_CHECK(!memcmp(b->res, b->res2, count * sizeof(float)), fail,
               "rank %d/%d %s count %zu block %zu: fused error feedback's residual differs from "
               "the unfused one", rank, nranks, c.ops->name, count, block);
    /* Fused in place: the last residual overwritten by the new one. */
    memcpy(b->res2, b->old, count * sizeof(float));
    s = shoal_allreduce_codec_ef(comm, b->x, b->y2, count, SHOAL_FLOAT32, SHOAL_SUM, &c, b->res2,
                                 b->res2, algo);
    RANK_CHECK(s == SHOAL_OK, fail, "fused in place: %s", shoal_status_string(s));
    RANK_CHECK(!memcmp(b->y, b->y2, count * sizeof(float)) &&
                   !memcmp(b->res, b->res2, count * sizeof(float)),
               fail, "rank %d/%d %s count %zu: error feedback in place differs", rank, nranks,
               c.ops->name, count);
    /* The identity: sum of (input + last residual) == result + sum of new
     * residuals, within 4 n A 2^-24, A the block maxima of the sums
     * summed over the ranks. */
    s = shoal_allgather(b->res2, b->all_res, count, SHOAL_FLOAT32, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "allgather of residuals: %s", shoal_status_string(s));
    for (size_t st = 0; st < count; st += block) {
        size_t e = st + block < count ? st + block : count;
        double a = 0;
        for (int r = 0; r < nranks; r++) {
            double m = 0;
            for (size_t i = st; i < e; i++) {
                float v = cref_input(r, i) + cref_old(r, i);
                m = fabs(v) > m ? fabs(v) : m;
            }
            a += m;
        }
        for (size_t i = st; i < e; i++) {
            double in = 0, out = b->y[i];
            for (int r = 0; r < nranks; r++) {
                in += (float)(cref_input(r, i) + cref_old(r, i));
                out += b->all_res[(size_t)r * count + i];
            }
            RANK_CHECK(fabs(in - out) <= 4 * nranks * a * 0x1p-24, fail,
                       "rank %d/%d %s count %zu block %zu: value %zu: inputs + last residuals "
                       "%.9g, result + new residuals %.9g", rank, nranks, c.ops->name, count,
                       block, i, in, out);
        }
    }
    return 0;
fail:
    return 1;
}

/* The ternary codec's shared scales of b->count values: per block, the
 * max over ranks of shoal_codec_block_absmax of each rank's input (what a
 * max all-reduce of the ranks' maxima gives). Uses b->y2 as scratch. */
static inline void cref_scales(cref_bufs_t *b, size_t block)
{
    size_t nb = (b->count + block - 1) / block;
    for (size_t k = 0; k < nb; k++)
        b->scales[k] = 0;
    for (int r = 0; r < b->nranks; r++) {
        for (size_t i = 0; i < b->count; i++)
            b->y2[i] = cref_input(r, i);
        shoal_codec_block_absmax(b->rank_scales, b->y2, b->count, block);
        for (size_t k = 0; k < nb; k++)
            b->scales[k] = b->rank_scales[k] > b->scales[k] ? b->rank_scales[k] : b->scales[k];
    }
}

/* The exact sum and, per value, A of its block. */
static inline void cref_reference(cref_bufs_t *b, size_t block)
{
    for (size_t i = 0; i < b->count; i++)
        b->exact[i] = 0;
    for (size_t s = 0; s < b->count; s += block) {
        size_t e = s + block < b->count ? s + block : b->count;
        double a = 0;
        for (int r = 0; r < b->nranks; r++) {
            double m = 0;
            for (size_t i = s; i < e; i++) {
                double v = cref_input(r, i);
                b->exact[i] += v;
                m = fabs(v) > m ? fabs(v) : m;
            }
            a += m;
        }
        for (size_t i = s; i < e; i++)
            b->absmax[i] = a;
    }
}

/* The bound on |result - exact| of value i (see the header); nhosts for
 * the hierarchical schedule. */
static inline double cref_bound(const cref_bufs_t *b, const shoal_codec_t *c,
                                cref_sched_t sched, int nhosts, size_t i)
{
    double n = b->nranks, a = b->absmax[i];
    double f = c->round == SHOAL_ROUND_NEAREST ? 0.5 : 1;
    if (c->ops == &shoal_codec_ternary) {
        double s = c->scales[i / c->block];
        return sched == CREF_HIER ? n * s * 1.01 : n * f * s * 1.01;
    }
    if (sched == CREF_TWO_SHOT)
        return f * 2.1 * a / 127;
    if (sched == CREF_TREE) {
        int levels = 0;
        while ((1L << levels) < b->nranks + 1)
            levels++;
        return f * levels * 1.1 * a / 127;
    }
    return (sched == CREF_HIER ? nhosts : n) * 1.1 * a / 127;
}

/* One codec and count (b->count) through shoal_allreduce_codec with algo
 * on comm, checked as the header says. 0 when every check holds. */
static inline int cref_check(shoal_comm_t comm, int rank, cref_bufs_t *b,
                             const shoal_codec_t *c, shoal_compress_algo_t algo,
                             cref_sched_t sched, int nhosts)
{
    size_t count = b->count;
    int nranks = b->nranks;
    const char *rn = c->round == SHOAL_ROUND_NEAREST ? "nearest" : "stochastic";
    for (size_t i = 0; i < count; i++)
        b->x[i] = cref_input(rank, i);
    for (size_t i = 0; i < count; i++)
        b->res[i] = NAN;
    shoal_status_t s = shoal_allreduce_codec(comm, b->x, b->y, count, SHOAL_FLOAT32, SHOAL_SUM,
                                             c, b->res, algo);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: %s allreduce of %zu (block %zu %s): %s (%s)", rank,
               c->ops->name, count, c->block, rn, shoal_status_string(s),
               shoal_comm_last_error(comm));
    RANK_CHECK(harness_same_bytes(comm, b->y, count * sizeof(float)), fail,
               "rank %d: results differ between ranks (%s count %zu block %zu %s)", rank,
               c->ops->name, count, c->block, rn);
    /* In place, no residual: the same bits. */
    memcpy(b->y2, b->x, count * sizeof(float));
    s = shoal_allreduce_codec(comm, b->y2, b->y2, count, SHOAL_FLOAT32, SHOAL_SUM, c, NULL,
                              algo);
    RANK_CHECK(s == SHOAL_OK, fail, "in-place: %s", shoal_status_string(s));
    RANK_CHECK(!memcmp(b->y, b->y2, count * sizeof(float)), fail,
               "rank %d: in-place result differs (%s count %zu)", rank, c->ops->name, count);

    cref_reference(b, c->block);
    s = shoal_allgather(b->res, b->all_res, count, SHOAL_FLOAT32, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "allgather of residuals: %s", shoal_status_string(s));
    double n = nranks;
    for (size_t i = 0; i < count; i++) {
        double a = b->absmax[i], err = (double)b->y[i] - b->exact[i];
        double bound = cref_bound(b, c, sched, nhosts, i);
        RANK_CHECK(fabs(err) <= bound, fail,
                   "rank %d/%d %s count %zu block %zu %s: value %zu is %.9g, exact %.9g, "
                   "bound %.9g", rank, nranks, c->ops->name, count, c->block, rn, i, b->y[i],
                   b->exact[i], bound);
        double sum_res = 0;
        for (int r = 0; r < nranks; r++)
            sum_res += b->all_res[(size_t)r * count + i];
        RANK_CHECK(nranks > 1 || sum_res == 0, fail, "single rank: residual %zu is %g", i, sum_res);
        RANK_CHECK(fabs(sum_res + err) <= 4 * n * a * 0x1p-24, fail,
                   "rank %d/%d %s count %zu block %zu %s: value %zu: residuals sum to %.9g, "
                   "exact - result is %.9g", rank, nranks, c->ops->name, count, c->block, rn,
                   i, sum_res, -err);
    }

    /* AVG: the same wire, the sum times 1/n. */
    s = shoal_allreduce_codec(comm, b->x, b->y2, count, SHOAL_FLOAT32, SHOAL_AVG, c, NULL,
                              algo);
    RANK_CHECK(s == SHOAL_OK, fail, "avg: %s", shoal_status_string(s));
    shoal_avg_finish_ref(b->y, b->y, count, SHOAL_FLOAT32, nranks);
    RANK_CHECK(!memcmp(b->y, b->y2, count * sizeof(float)), fail,
               "rank %d: AVG is not SUM / %d (%s count %zu)", rank, nranks, c->ops->name,
               count);
    return cref_check_ef(comm, rank, b, c, algo);
fail:
    return 1;
}

/* The codec of a matrix entry: int8 or ternary (whose scales it computes
 * into b for b->count values), block, rounding; seed 42 and step count,
 * the same on every rank. */
static inline shoal_codec_t cref_codec(cref_bufs_t *b, int ternary, size_t block, int stochastic)
{
    shoal_codec_t c = {.ops = ternary ? &shoal_codec_ternary : &shoal_codec_int8,
                       .block = block,
                       .round = stochastic ? SHOAL_ROUND_STOCHASTIC : SHOAL_ROUND_NEAREST,
                       .seed = 42, .step = b->count};
    if (ternary) {
        cref_scales(b, block);
        c.scales = b->scales;
    }
    return c;
}

/* A matrix of one schedule: every count of counts (ended by SIZE_MAX) x
 * the int8 codec (and the ternary one with ternary set) x blocks of 32, 64
 * and 128 x both roundings, through cref_check. */
typedef struct {
    const size_t *counts;
    shoal_compress_algo_t algo;
    cref_sched_t sched;
    int ternary;
} cref_matrix_t;

/* For harness_run_ranks: n matrices, one after another on one
 * communicator. */
typedef struct {
    const cref_matrix_t *m;
    int n;
} cref_matrices_t;

/* Whether a matrix checks count number k with block size number bl (of
 * nblocks) and rounding rd, on nranks ranks: one block size and rounding
 * per count, turning with the count and the rank count, so that over the
 * counts every pair comes up and over the rank counts every count meets
 * every pair. */
static inline int cref_codec_wanted(size_t k, size_t bl, size_t nblocks, int rd, int nranks)
{
    return bl + nblocks * (size_t)rd == (k + (size_t)nranks) % (2 * nblocks);
}

static inline int cref_run_matrix(shoal_comm_t comm, int rank, int nranks,
                                  const cref_matrix_t *m)
{
    size_t most = 0;
    for (size_t k = 0; m->counts[k] != SIZE_MAX; k++)
        most = m->counts[k] > most ? m->counts[k] : most;
    cref_bufs_t b;
    RANK_CHECK(cref_alloc(&b, most, nranks), fail, "out of memory");
    static const size_t blocks[] = {32, 64, 128};
    for (size_t k = 0; m->counts[k] != SIZE_MAX; k++) {
        b.count = m->counts[k];
        for (int tern = 0; tern <= (m->ternary ? 1 : 0); tern++) {
            for (size_t bl = 0; bl < 3; bl++) {
                for (int rd = 0; rd < 2; rd++) {
                    if (!cref_codec_wanted(k, bl, 3, rd, nranks))
                        continue;
                    shoal_codec_t c = cref_codec(&b, tern, blocks[bl], rd);
                    if (cref_check(comm, rank, &b, &c, m->algo, m->sched, 1))
                        return 1;
                }
            }
        }
    }
    cref_free(&b);
    return 0;
fail:
    return 1;
}

static inline int cref_rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const cref_matrices_t *ms = arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    for (int i = 0; i < ms->n; i++)
        RANK_CHECK(cref_run_matrix(comm, rank, nranks, &ms->m[i]) == 0, fail,
                   "rank %d/%d: schedule %d failed", rank, nranks, (int)ms->m[i].algo);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

#endif
