/* The adaptive compressor (SHOAL_COMPRESS_ADAPTIVE, shoal.h): a choice of
 * compression per tensor of the bucket's layout, under the caller's error
 * budget, remade at the first call of every window.
 *
 * Statistics. For tensor t and choice k, on y = this call's input plus the
 * residual (the values the call compresses), each rank computes e[t][k],
 * the squared 2-norm of what k would leave in the residual, and n[t] =
 * |y|^2:
 * - none: 0;
 * - INT8 and INT4 (nearest rounding): |y - decode(encode(y))|^2, the codec
 *   run on y;
 * - TERNARY: the expected squared error of its stochastic rounding,
 *   sum |y| (s - |y|), under the scales the call would share: each block's
 *   largest |y| over the ranks (a max all-reduce of the block maxima
 *   first), as bf16 rounded up (clipping is not counted);
 * - POWERSGD: |y|^2 - |y^T P|^2, P this rank's P = y Q orthonormalised
 *   (Q the tensor's warm start): what the projection on P leaves.
 * One all-reduce sums them over the ranks (fp64), so every rank holds the
 * same bits, and the choice below reads nothing else.
 *
 * Choice. The budget B bounds the bucket's relative error: sum over the
 * tensors of e[t][k_t] within B^2 sum n[t]. Each error is counted in
 * thousandths of that allowance, rounded up (a choice above it never
 * fits), and a dynamic programme over the tensors (L-GreCo's) finds the
 * choices of fewest wire bytes (per rank, of each choice's all-reduce of
 * the tensor: the codec's wire, ternary's scales, PowerSGD's P and Q) that
 * fit; among equal bytes the earlier choice in the list. Full precision
 * always fits, so there is always a choice.
 *
 * Runs. Each tensor runs its choice's job (compressor.c) on its slice of
 * the input, output and residuals, one after the other in layout order.
 * PowerSGD keeps each matrix's Q whether chosen or not; a choice that
 * changes carries the residual over, since what the last call lost is the
 * tensor's, whatever lost it. */
#include "compressor.h"
#include "compressor_priv.h"

#include "compress/codec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The choices, in the order that breaks ties. */
enum { OPT_NONE, OPT_I8_128, OPT_I8_64, OPT_I8_32, OPT_I4, OPT_TERNARY, OPT_PSGD, NOPT };

static const struct {
    shoal_compress_kind_t kind;
    unsigned block;
} opts[NOPT] = {
    [OPT_NONE] = {0, 0},
    [OPT_I8_128] = {SHOAL_COMPRESS_INT8, 128},
    [OPT_I8_64] = {SHOAL_COMPRESS_INT8, 64},
    [OPT_I8_32] = {SHOAL_COMPRESS_INT8, 32},
    [OPT_I4] = {SHOAL_COMPRESS_INT4, 64},
    [OPT_TERNARY] = {SHOAL_COMPRESS_TERNARY, 64},
    [OPT_PSGD] = {SHOAL_COMPRESS_POWERSGD, 0},
};

/* Thousandths of the allowance the programme counts in. */
#define ADAPT_UNITS 1000
#define ADAPT_MIN_BLOCK 32

typedef struct {
    size_t off, count, rows, cols;
    size_t moff;        /* its first block in the maxima */
    shoal_psgd_t *psgd; /* a matrix that PowerSGD shrinks; else NULL */
    float *buf1, *buf2;
    uint64_t bytes[NOPT]; /* wire bytes of each choice; 0: not offered */
    int choice;
    double error;       /* the choice's relative error at the last choice */
    uint64_t since, changes;
} adapt_tensor_t;

struct shoal_comp_adapt {
    size_t nt, most;    /* tensors; values of the largest */
    adapt_tensor_t *t;
    double *stats;      /* nt x (NOPT + 1): e[t][k], then n[t] */
    float *y, *dec;     /* most floats: input plus residual; a decode */
    unsigned char *wire;
    float *maxima;      /* every tensor's block maxima (TERNARY's blocks), nmaxima */
    size_t nmaxima;
    float *scales;      /* TERNARY: most / 32 blocks, and as bf16 */
    uint16_t *scales16;
    double *cost;       /* the programme: 2 x (ADAPT_UNITS + 1) */
    uint64_t *bytes;    /* nt x NOPT: each tensor's bytes, for tests */
    unsigned char *pick; /* nt x (ADAPT_UNITS + 1): each tensor's choice per budget */
    double error;       /* the bucket's at the last choice */
};

/* The saved part of a tensor in a checkpoint. */
typedef struct {
    uint64_t choice, since, changes;
    double error;
} adapt_saved_t;

static void tensor_bytes(adapt_tensor_t *t, int nranks)
{
    for (int k = OPT_I8_128; k <= OPT_TERNARY; k++) {
        shoal_codec_t cd = {.ops = opts[k].kind == SHOAL_COMPRESS_INT4      ? &shoal_codec_int4
                                   : opts[k].kind == SHOAL_COMPRESS_TERNARY ? &shoal_codec_ternary
                                                                            : &shoal_codec_int8,
                            .block = opts[k].block, .packed = nranks <= 7, .wide = nranks > 127};
        t->bytes[k] = cd.ops->wire_bytes(&cd, t->count);
        if (k == OPT_TERNARY) /* the scales' all-reduce, bf16 */
            t->bytes[k] += 2 * ((t->count + opts[k].block - 1) / opts[k].block);
    }
    t->bytes[OPT_NONE] = t->count * sizeof(float);
    if (t->psgd)
        t->bytes[OPT_PSGD] = (shoal_psgd_len1(t->psgd) + shoal_psgd_len2(t->psgd)) *
                             sizeof(float);
}

shoal_status_t shoal_comp_adapt_new(struct shoal_compressor *c,
                                    const shoal_compress_layout_t *layout)
{
    struct shoal_comp_adapt *a = calloc(1, sizeof(*a));
    if (!a)
        return SHOAL_ERR_NO_MEMORY;
    c->adapt = a;
    size_t one_rows = 1, one_cols = c->count;
    a->nt = layout ? layout->ntensors : 1;
    const size_t *rows = layout ? layout->rows : &one_rows;
    const size_t *cols = layout ? layout->cols : &one_cols;
    a->t = calloc(a->nt ? a->nt : 1, sizeof(*a->t));
    a->stats = calloc((a->nt ? a->nt : 1) * (NOPT + 1), sizeof(double));
    a->pick = calloc((a->nt ? a->nt : 1) * (ADAPT_UNITS + 1), 1);
    a->cost = calloc(2 * (ADAPT_UNITS + 1), sizeof(double));
    a->bytes = calloc((a->nt ? a->nt : 1) * NOPT, sizeof(uint64_t));
    if (!a->t || !a->stats || !a->pick || !a->cost || !a->bytes)
        return SHOAL_ERR_NO_MEMORY;
    size_t off = 0;
    for (size_t i = 0; i < a->nt; i++) {
        adapt_tensor_t *t = &a->t[i];
        *t = (adapt_tensor_t){.off = off, .count = rows[i] * cols[i], .rows = rows[i],
                              .cols = cols[i], .choice = OPT_NONE};
        off += t->count;
        t->moff = a->nmaxima;
        a->nmaxima += (t->count + opts[OPT_TERNARY].block - 1) / opts[OPT_TERNARY].block;
        a->most = t->count > a->most ? t->count : a->most;
        /* PowerSGD for a matrix its rank shrinks. */
        size_t r = c->opt.rank;
        if (t->rows > 1 && t->cols > 1 && r < t->rows && r < t->cols &&
            r * (t->rows + t->cols) < t->count) {
            shoal_status_t s = shoal_psgd_create(1, &t->rows, &t->cols, c->opt.rank,
                                                 c->opt.seed + i, &t->psgd);
            if (s != SHOAL_OK)
                return s;
            t->buf1 = malloc(shoal_psgd_len1(t->psgd) * sizeof(float));
            t->buf2 = malloc(shoal_psgd_len2(t->psgd) * sizeof(float));
            if (!t->buf1 || !t->buf2)
                return SHOAL_ERR_NO_MEMORY;
        }
        tensor_bytes(t, c->nranks);
        memcpy(a->bytes + i * NOPT, t->bytes, sizeof(t->bytes));
    }
    size_t most = a->most ? a->most : 1;
    shoal_codec_t widest = {.ops = &shoal_codec_int8, .block = ADAPT_MIN_BLOCK};
    a->y = malloc(most * sizeof(float));
    a->dec = malloc(most * sizeof(float));
    a->wire = malloc(widest.ops->wire_bytes(&widest, most) + 64);
    a->scales = malloc((most / ADAPT_MIN_BLOCK + 1) * sizeof(float));
    a->scales16 = malloc((most / ADAPT_MIN_BLOCK + 1) * sizeof(uint16_t));
    a->maxima = malloc((a->nmaxima ? a->nmaxima : 1) * sizeof(float));
    if (!a->y || !a->dec || !a->wire || !a->scales || !a->scales16 || !a->maxima)
        return SHOAL_ERR_NO_MEMORY;
    return SHOAL_OK;
}

void shoal_comp_adapt_free(struct shoal_compressor *c)
{
    struct shoal_comp_adapt *a = c->adapt;
    if (!a)
        return;
    for (size_t i = 0; a->t && i < a->nt; i++) {
        if (a->t[i].psgd)
            shoal_psgd_destroy(a->t[i].psgd);
        free(a->t[i].buf1);
        free(a->t[i].buf2);
    }
    free(a->t);
    free(a->stats);
    free(a->pick);
    free(a->cost);
    free(a->bytes);
    free(a->y);
    free(a->dec);
    free(a->wire);
    free(a->scales);
    free(a->scales16);
    free(a->maxima);
    free(a);
    c->adapt = NULL;
}

/* Tensor i's statistics on y (its count values): e[k] and the norm. */
static void measure(struct shoal_compressor *c, adapt_tensor_t *t, const float *y, double *e)
{
    struct shoal_comp_adapt *a = c->adapt;
    size_t n = t->count;
    double norm = 0;
    for (size_t i = 0; i < n; i++)
        norm += (double)y[i] * y[i];
    for (int k = 0; k < NOPT; k++) {
        double err = 0;
        if (k == OPT_NONE || !t->bytes[k]) {
            err = 0;
        } else if (k == OPT_TERNARY) {
            size_t b = opts[k].block;
            const float *shared = a->maxima + t->moff;
            for (size_t i = 0; i < n; i++) {
                double v = fabs((double)y[i]), s = shared[i / b];
                err += isfinite(v) && isfinite(s) ? v * (s - v) : INFINITY;
            }
        } else if (k == OPT_PSGD) {
            shoal_psgd_phase1(t->psgd, y, t->buf1);
            shoal_psgd_phase2(t->psgd, y, t->buf1, t->buf2);
            double kept = 0;
            for (size_t i = 0; i < shoal_psgd_len2(t->psgd); i++)
                kept += (double)t->buf2[i] * t->buf2[i];
            err = norm - kept > 0 ? norm - kept : 0;
        } else {
            shoal_comp_job_t job = {.kind = opts[k].kind, .block = opts[k].block};
            shoal_codec_t cd = shoal_comp_job_codec(c, &job, 0);
            cd.round = SHOAL_ROUND_NEAREST;
            cd.ops->encode(&cd, a->wire, y, NULL, NULL, n, 0);
            cd.ops->decode(&cd, a->dec, a->wire, n, 0);
            for (size_t i = 0; i < n; i++) {
                double d = (double)y[i] - a->dec[i];
                err += d * d;
            }
        }
        /* A non-finite error (NaN in the tensor) fits no budget. */
        e[k] = isfinite(err) ? err : INFINITY;
    }
    e[NOPT] = isfinite(norm) ? norm : 0;
}

/* The choices of fewest bytes within the budget, from a->stats (agreed). */
static void choose(struct shoal_compressor *c, uint64_t step)
{
    struct shoal_comp_adapt *a = c->adapt;
    const size_t W = NOPT + 1, U = ADAPT_UNITS;
    double total = 0;
    for (size_t i = 0; i < a->nt; i++)
        total += a->stats[i * W + NOPT];
    double budget = (double)c->opt.budget, allow = budget * budget * total;
    double *prev = a->cost, *cur = a->cost + U + 1;
    for (size_t u = 0; u <= U; u++)
        prev[u] = 0;
    /* cost after tensor i for an error of at most u units; pick[i][u]. */
    for (size_t i = 0; i < a->nt; i++) {
        const adapt_tensor_t *t = &a->t[i];
        const double *e = a->stats + i * W;
        for (size_t u = 0; u <= U; u++) {
            double best = INFINITY;
            int at = OPT_NONE;
            for (int k = 0; k < NOPT; k++) {
                if (!t->bytes[k] && k != OPT_NONE)
                    continue;
                double units = e[k] <= 0 ? 0 : allow > 0 ? ceil(e[k] / allow * U) : INFINITY;
                if (!(units <= (double)u))
                    continue;
                double v = prev[u - (size_t)units] + (double)t->bytes[k];
                if (v < best) {
                    best = v;
                    at = k;
                }
            }
            cur[u] = best;
            a->pick[i * (U + 1) + u] = (unsigned char)at;
        }
        double *swap = prev;
        prev = cur;
        cur = swap;
    }
    /* Walk back from the whole allowance. */
    size_t u = U;
    double err = 0;
    for (size_t i = a->nt; i-- > 0;) {
        adapt_tensor_t *t = &a->t[i];
        const double *e = a->stats + i * W;
        int k = a->pick[i * (U + 1) + u];
        double units = e[k] <= 0 ? 0 : ceil(e[k] / allow * U);
        u -= (size_t)units;
        if (k != t->choice) {
            t->choice = k;
            t->since = step;
            t->changes++;
        }
        t->error = e[NOPT] > 0 ? sqrt(e[k] / e[NOPT]) : 0;
        err += e[k];
    }
    a->error = total > 0 ? sqrt(err / total) : 0;
}

shoal_status_t shoal_comp_run_adaptive(struct shoal_comm *comm, const shoal_call_t *call,
                                       const float *x, const float *res_in, float *out,
                                       float *res)
{
    struct shoal_compressor *c = call->comp;
    struct shoal_comp_adapt *a = c->adapt;
    shoal_status_t s = SHOAL_OK;
    if (c->step % c->opt.window == 0) {
        /* Ternary's shared scales, as its run would agree them. */
        for (size_t i = 0; i < a->nt; i++) {
            const adapt_tensor_t *t = &a->t[i];
            shoal_comp_widen(a->y, x + t->off, t->count, SHOAL_FLOAT32,
                             res_in ? res_in + t->off : NULL);
            shoal_codec_block_absmax(a->maxima + t->moff, a->y, t->count,
                                     opts[OPT_TERNARY].block);
        }
        shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = a->maxima,
                                  .recvbuf = a->maxima, .count = a->nmaxima,
                                  .dtype = SHOAL_FLOAT32, .op = SHOAL_MAX};
        s = shoal_comp_inner(comm, call, &args, SHOAL_SIG_COMPRESSOR);
        if (s != SHOAL_OK)
            return s;
        for (size_t b = 0; b < a->nmaxima; b++)
            a->maxima[b] = shoal_bf16_to_f32(shoal_comp_scale_bf16_up(a->maxima[b]));
        for (size_t i = 0; i < a->nt; i++) {
            const adapt_tensor_t *t = &a->t[i];
            shoal_comp_widen(a->y, x + t->off, t->count, SHOAL_FLOAT32,
                             res_in ? res_in + t->off : NULL);
            measure(c, &a->t[i], a->y, a->stats + i * (NOPT + 1));
        }
        args = (shoal_coll_args_t){.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = a->stats,
                                   .recvbuf = a->stats, .count = a->nt * (NOPT + 1),
                                   .dtype = SHOAL_FLOAT64, .op = SHOAL_SUM};
        s = shoal_comp_inner(comm, call, &args, SHOAL_SIG_COMPRESSOR);
        if (s != SHOAL_OK)
            return s;
        choose(c, c->step);
    }
    for (size_t i = 0; s == SHOAL_OK && i < a->nt; i++) {
        adapt_tensor_t *t = &a->t[i];
        int k = t->choice;
        shoal_comp_job_t job = {
            .kind = opts[k].kind, .block = opts[k].block, .count = t->count,
            .scales = a->scales, .scales16 = a->scales16,
            .nblocks = k == OPT_TERNARY ? (t->count + opts[k].block - 1) / opts[k].block : 0,
            .psgd = t->psgd, .buf1 = t->buf1, .buf2 = t->buf2, .x = a->y,
        };
        const float *ri = res_in ? res_in + t->off : NULL;
        float *ro = res ? res + t->off : NULL;
        if (k == OPT_NONE)
            s = shoal_comp_run_plain(comm, call, &job, x + t->off, ri, out + t->off, ro);
        else if (k == OPT_PSGD)
            s = shoal_comp_run_powersgd(comm, call, &job, x + t->off, ri, out + t->off, ro);
        else
            s = shoal_comp_run_codec(comm, call, &job, x + t->off, ri, out + t->off, ro);
    }
    return s;
}

size_t shoal_comp_adapt_state_bytes(const struct shoal_compressor *c)
{
    const struct shoal_comp_adapt *a = c->adapt;
    if (!a)
        return 0;
    size_t q = 0;
    for (size_t i = 0; i < a->nt; i++)
        q += a->t[i].psgd ? shoal_psgd_len2(a->t[i].psgd) * sizeof(float) : 0;
    return sizeof(double) + a->nt * sizeof(adapt_saved_t) + q;
}

void shoal_comp_adapt_save(const struct shoal_compressor *c, void *buf)
{
    const struct shoal_comp_adapt *a = c->adapt;
    unsigned char *p = buf;
    memcpy(p, &a->error, sizeof(double));
    p += sizeof(double);
    for (size_t i = 0; i < a->nt; i++) {
        const adapt_tensor_t *t = &a->t[i];
        adapt_saved_t sv = {.choice = (uint64_t)t->choice, .since = t->since,
                            .changes = t->changes, .error = t->error};
        memcpy(p, &sv, sizeof(sv));
        p += sizeof(sv);
    }
    for (size_t i = 0; i < a->nt; i++) {
        const adapt_tensor_t *t = &a->t[i];
        if (!t->psgd)
            continue;
        size_t bytes = shoal_psgd_len2(t->psgd) * sizeof(float);
        memcpy(p, shoal_psgd_state(t->psgd), bytes);
        p += bytes;
    }
}

shoal_status_t shoal_comp_adapt_load(struct shoal_compressor *c, const void *buf)
{
    struct shoal_comp_adapt *a = c->adapt;
    const unsigned char *p = (const unsigned char *)buf + sizeof(double);
    for (size_t i = 0; i < a->nt; i++) {
        adapt_saved_t sv;
        memcpy(&sv, p + i * sizeof(sv), sizeof(sv));
        if (sv.choice >= NOPT || (sv.choice != OPT_NONE && !a->t[i].bytes[sv.choice]))
            return SHOAL_ERR_INVALID_ARG;
    }
    memcpy(&a->error, buf, sizeof(double));
    for (size_t i = 0; i < a->nt; i++) {
        adapt_tensor_t *t = &a->t[i];
        adapt_saved_t sv;
        memcpy(&sv, p, sizeof(sv));
        p += sizeof(sv);
        t->choice = (int)sv.choice;
        t->since = sv.since;
        t->changes = sv.changes;
        t->error = sv.error;
    }
    for (size_t i = 0; i < a->nt; i++) {
        adapt_tensor_t *t = &a->t[i];
        if (!t->psgd)
            continue;
        size_t bytes = shoal_psgd_len2(t->psgd) * sizeof(float);
        memcpy(shoal_psgd_state(t->psgd), p, bytes);
        p += bytes;
    }
    return SHOAL_OK;
}

void shoal_comp_adapt_reset(struct shoal_compressor *c)
{
    struct shoal_comp_adapt *a = c->adapt;
    if (!a)
        return;
    a->error = 0;
    for (size_t i = 0; i < a->nt; i++) {
        adapt_tensor_t *t = &a->t[i];
        t->choice = OPT_NONE;
        t->since = t->changes = 0;
        t->error = 0;
        if (t->psgd)
            shoal_psgd_reset(t->psgd);
    }
}

double shoal_comp_adapt_error(const struct shoal_compressor *c)
{
    return c->adapt ? c->adapt->error : 0;
}

shoal_status_t shoal_compressor_choices(shoal_compressor_t comp,
                                        shoal_compress_choice_t *choices, size_t n)
{
    if (!comp || comp->magic != COMP_MAGIC || !comp->adapt || !choices ||
        n != comp->adapt->nt || atomic_load(&comp->busy))
        return SHOAL_ERR_INVALID_ARG;
    const struct shoal_comp_adapt *a = comp->adapt;
    for (size_t i = 0; i < n; i++) {
        const adapt_tensor_t *t = &a->t[i];
        choices[i] = (shoal_compress_choice_t){
            .kind = opts[t->choice].kind, .block = opts[t->choice].block,
            .rank = t->choice == OPT_PSGD ? comp->opt.rank : 0, .error = t->error,
            .bytes = t->bytes[t->choice], .since = t->since, .changes = t->changes,
        };
    }
    return SHOAL_OK;
}

shoal_status_t shoal_compressor_adapt_table(shoal_compressor_t comp, const double **stats_p,
                                            const uint64_t **bytes_p, size_t *nopt_p)
{
    if (!comp || comp->magic != COMP_MAGIC || !comp->adapt)
        return SHOAL_ERR_INVALID_ARG;
    *stats_p = comp->adapt->stats;
    *bytes_p = comp->adapt->bytes;
    *nopt_p = NOPT;
    return SHOAL_OK;
}
