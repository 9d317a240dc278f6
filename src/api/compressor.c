/* Compressors: options, creation (with the check that every rank agrees),
 * checkpoints, and the compressed all-reduce (compressor.h). */
#include "compressor.h"
#include "compressor_priv.h"

#include "compress/codec.h"
#include "compress/powersgd.h"

#include "base/dtype.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The inner state a checkpoint carries, after its header. */
typedef struct {
    uint64_t magic, hash, nranks, step, nres, nq, nadapt;
} state_head_t;

shoal_status_t shoal_compress_options_init(shoal_compress_options_t *o,
                                           shoal_compress_kind_t kind)
{
    if (!o || kind < SHOAL_COMPRESS_INT8 || kind > SHOAL_COMPRESS_ADAPTIVE)
        return SHOAL_ERR_INVALID_ARG;
    *o = (shoal_compress_options_t){
        .size = sizeof(*o), .kind = kind, .error_feedback = kind != SHOAL_COMPRESS_MAJORITY,
        .block = 64, .rank = 4, .budget = 0.1f, .window = 100,
    };
    return SHOAL_OK;
}

/* FNV-1a over a run of bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#define FNV(h, v) fnv((h), &(v), sizeof(v))

static uint64_t options_hash(const shoal_compress_options_t *o, size_t count,
                             shoal_dtype_t dtype, const shoal_compress_layout_t *layout)
{
    uint64_t h = 0xcbf29ce484222325ull, v;
    uint32_t clip, budget;
    memcpy(&clip, &o->clip_sigma, sizeof(clip));
    memcpy(&budget, &o->budget, sizeof(budget));
    v = (uint64_t)o->kind; h = FNV(h, v);
    v = (uint64_t)!!o->error_feedback; h = FNV(h, v);
    v = o->block; h = FNV(h, v);
    v = (uint64_t)!!o->stochastic; h = FNV(h, v);
    h = FNV(h, clip);
    v = o->rank; h = FNV(h, v);
    v = o->warmup_steps; h = FNV(h, v);
    h = FNV(h, o->seed);
    v = (uint64_t)o->algo; h = FNV(h, v);
    v = (uint64_t)o->coll; h = FNV(h, v);
    h = FNV(h, budget);
    v = o->window; h = FNV(h, v);
    v = count; h = FNV(h, v);
    v = (uint64_t)dtype; h = FNV(h, v);
    if (layout) {
        v = layout->ntensors; h = FNV(h, v);
        for (size_t t = 0; t < layout->ntensors; t++) {
            v = layout->rows[t]; h = FNV(h, v);
            v = layout->cols[t]; h = FNV(h, v);
        }
    }
    return h | 1; /* 0 marks a rank whose arguments are invalid */
}

/* Which kinds each collective offers, and what it needs of them; NULL
 * when o is fine. */
static const char *coll_kind_problem(const shoal_compress_options_t *o)
{
    int k = o->kind;
    switch (o->coll) {
    case SHOAL_COMPRESS_COLL_ALLGATHER:
        if (k != SHOAL_COMPRESS_INT8 && k != SHOAL_COMPRESS_INT4)
            return "the compressed all-gather takes int8 or int4";
        return o->algo != SHOAL_COMPRESS_ALGO_AUTO
                   ? "the compressed all-gather has one schedule (algo auto)" : NULL;
    case SHOAL_COMPRESS_COLL_REDUCE_SCATTER:
        if (k != SHOAL_COMPRESS_INT8 && k != SHOAL_COMPRESS_INT4 && k != SHOAL_COMPRESS_SIGN)
            return "the compressed reduce-scatter takes int8, int4 or sign";
        return o->algo == SHOAL_COMPRESS_ALGO_TREE
                   ? "the compressed reduce-scatter runs two-shot or ring" : NULL;
    case SHOAL_COMPRESS_COLL_ALLTOALL:
        if (k != SHOAL_COMPRESS_INT8 && k != SHOAL_COMPRESS_INT4)
            return "the compressed all-to-all takes int8 or int4";
        if (o->algo != SHOAL_COMPRESS_ALGO_AUTO)
            return "the compressed all-to-all has one schedule (algo auto)";
        return o->error_feedback ? "the compressed all-to-all keeps no residual "
                                   "(error_feedback must be 0)" : NULL;
    default:
        return NULL;
    }
}

/* Why the arguments are invalid on this rank, or NULL. */
static const char *options_problem(const shoal_compress_options_t *o, size_t count,
                                   shoal_dtype_t dtype, const shoal_compress_layout_t *layout)
{
    if (!o)
        return "options is NULL";
    if (o->size != sizeof(*o))
        return "options.size is not sizeof(shoal_compress_options_t) (use "
               "shoal_compress_options_init)";
    if (o->kind < SHOAL_COMPRESS_INT8 || o->kind > SHOAL_COMPRESS_ADAPTIVE)
        return "unknown compression kind";
    if (o->algo < SHOAL_COMPRESS_ALGO_AUTO || o->algo > SHOAL_COMPRESS_ALGO_TREE)
        return "unknown compression algo";
    if (o->coll < SHOAL_COMPRESS_COLL_ALLREDUCE || o->coll > SHOAL_COMPRESS_COLL_ALLTOALL)
        return "unknown compressed collective (coll)";
    const char *coll_problem = coll_kind_problem(o);
    if (coll_problem)
        return coll_problem;
    if (o->kind == SHOAL_COMPRESS_TERNARY && o->algo != SHOAL_COMPRESS_ALGO_AUTO &&
        o->algo != SHOAL_COMPRESS_ALGO_RING)
        return "ternary has only the ring schedule (its ring sums are exact)";
    if (o->kind == SHOAL_COMPRESS_SIGN && o->algo != SHOAL_COMPRESS_ALGO_AUTO &&
        o->algo != SHOAL_COMPRESS_ALGO_TWO_SHOT)
        return "sign has only the two-shot schedule (a ring would requantise partial sums "
               "to signs)";
    if (o->kind == SHOAL_COMPRESS_INT4 && o->algo == SHOAL_COMPRESS_ALGO_TREE)
        return "the tree schedule is int8's only";
    if (o->kind == SHOAL_COMPRESS_MAJORITY && o->error_feedback)
        return "the majority vote keeps no residual (error_feedback must be 0)";
    if (o->kind == SHOAL_COMPRESS_ADAPTIVE && (!isfinite(o->budget) || !(o->budget > 0)))
        return "the adaptive compressor's budget must be finite and > 0";
    if (o->kind == SHOAL_COMPRESS_ADAPTIVE && o->window == 0)
        return "the adaptive compressor's window must be at least 1";
    if (o->kind != SHOAL_COMPRESS_POWERSGD && o->block != 32 && o->block != 64 &&
        o->block != 128)
        return "block must be 32, 64 or 128";
    if (!isfinite(o->clip_sigma) || o->clip_sigma < 0)
        return "clip_sigma must be finite and >= 0";
    if (o->kind == SHOAL_COMPRESS_POWERSGD && o->rank == 0)
        return "PowerSGD's rank must be at least 1";
    if (dtype != SHOAL_FLOAT32 && dtype != SHOAL_FLOAT16 && dtype != SHOAL_BFLOAT16)
        return "compression takes float32, float16 or bfloat16";
    if (layout) {
        if (layout->ntensors && (!layout->rows || !layout->cols))
            return "layout has NULL rows or cols";
        size_t sum = 0;
        for (size_t t = 0; t < layout->ntensors; t++) {
            size_t r = layout->rows[t], c = layout->cols[t];
            if (c && r > SIZE_MAX / c)
                return "layout sizes overflow";
            if (sum + r * c < sum)
                return "layout sizes overflow";
            sum += r * c;
        }
        if (sum != count)
            return "layout's tensors do not add up to count";
    }
    return NULL;
}

static void comp_free(shoal_compressor_t c)
{
    if (!c)
        return;
    shoal_comp_dev_free(c);
    c->magic = 0;
    free(c->res);
    free(c->res_next);
    free(c->x);
    free(c->out);
    free(c->scales);
    free(c->scales16);
    free(c->buf1);
    free(c->buf2);
    shoal_comp_colls_free(c);
    shoal_comp_adapt_free(c);
    if (c->psgd)
        shoal_psgd_destroy(c->psgd);
    free(c);
}

static float *floats(size_t n)
{
    return malloc((n ? n : 1) * sizeof(float));
}

/* A compressor with its buffers; nothing collective. */
static shoal_status_t comp_new(struct shoal_comm *comm, const shoal_compress_options_t *o,
                               size_t count, shoal_dtype_t dtype,
                               const shoal_compress_layout_t *layout, shoal_compressor_t *c_p)
{
    shoal_compressor_t c = calloc(1, sizeof(*c));
    if (!c)
        return SHOAL_ERR_NO_MEMORY;
    c->magic = COMP_MAGIC;
    c->comm = comm;
    c->opt = *o;
    c->count = count;
    c->dtype = dtype;
    c->nranks = comm->team.nranks;
    c->hash = options_hash(o, count, dtype, layout);
    atomic_init(&c->dev.lost, 0);
    /* The collective's shape on this rank. */
    size_t n = (size_t)c->nranks, all = count * n;
    if (count && all / n != count) {
        free(c);
        return SHOAL_ERR_NO_MEMORY;
    }
    c->nin = o->coll == SHOAL_COMPRESS_COLL_REDUCE_SCATTER ||
             o->coll == SHOAL_COMPRESS_COLL_ALLTOALL ? all : count;
    c->nout = o->coll == SHOAL_COMPRESS_COLL_ALLGATHER ||
              o->coll == SHOAL_COMPRESS_COLL_ALLTOALL ? all : count;
    c->nres = o->error_feedback ? c->nin : 0;
    int ok = 1;
    if (o->error_feedback) {
        ok &= (c->res = calloc(c->nres ? c->nres : 1, sizeof(float))) != NULL;
        ok &= (c->res_next = floats(c->nres)) != NULL;
    }
    /* The codecs take the residual piece by piece (no x for them in
     * fp32); PowerSGD reads its input three times and keeps the sum. */
    if ((o->error_feedback && o->kind == SHOAL_COMPRESS_POWERSGD) || dtype != SHOAL_FLOAT32)
        ok &= (c->x = floats(c->nin)) != NULL;
    if (dtype != SHOAL_FLOAT32)
        ok &= (c->out = floats(c->nout)) != NULL;
    if (o->kind == SHOAL_COMPRESS_TERNARY || o->kind == SHOAL_COMPRESS_MAJORITY) {
        c->nblocks = (count + o->block - 1) / o->block;
        ok &= (c->scales = floats(c->nblocks)) != NULL;
        ok &= (c->scales16 = calloc(c->nblocks ? c->nblocks : 1, sizeof(uint16_t))) != NULL;
    }
    if (ok)
        ok &= shoal_comp_colls_alloc(c) == SHOAL_OK;
    if (ok && o->kind == SHOAL_COMPRESS_ADAPTIVE) {
        shoal_status_t s = shoal_comp_adapt_new(c, layout);
        if (s != SHOAL_OK) {
            comp_free(c);
            return s;
        }
    }
    if (ok && o->kind == SHOAL_COMPRESS_POWERSGD) {
        /* Without a layout: one vector, which PowerSGD reduces plainly. */
        size_t one_rows = 1, one_cols = count;
        const size_t *rows = layout ? layout->rows : &one_rows;
        const size_t *cols = layout ? layout->cols : &one_cols;
        size_t nt = layout ? layout->ntensors : count > 0;
        shoal_status_t s = shoal_psgd_create(nt, rows, cols, o->rank, o->seed, &c->psgd);
        if (s != SHOAL_OK) {
            comp_free(c);
            return s;
        }
        ok &= (c->buf1 = floats(shoal_psgd_len1(c->psgd))) != NULL;
        ok &= (c->buf2 = floats(shoal_psgd_len2(c->psgd))) != NULL;
    }
    if (!ok) {
        comp_free(c);
        return SHOAL_ERR_NO_MEMORY;
    }
    *c_p = c;
    return SHOAL_OK;
}

shoal_status_t shoal_compressor_create(shoal_comm_t comm, const shoal_compress_options_t *options,
                                       size_t count, shoal_dtype_t dtype,
                                       const shoal_compress_layout_t *layout,
                                       shoal_compressor_t *comp_p)
{
    const char *what = "shoal_compressor_create";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    const char *problem = comp_p ? options_problem(options, count, dtype, layout)
                                 : "comp_p is NULL";
    /* Every rank takes part in the exchange, a rank with bad arguments
     * too (with hash 0), so that all fail alike instead of some waiting. */
    uint64_t mine = problem ? 0 : options_hash(options, count, dtype, layout);
    int n = comm->team.nranks;
    uint64_t *all = calloc((size_t)n, sizeof(*all));
    shoal_comm_leave(comm);
    if (!all)
        return shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: no memory", what);
    s = shoal_allgather(&mine, all, 1, SHOAL_UINT64, comm);
    int differs = -1, invalid_there = 0;
    for (int r = 0; s == SHOAL_OK && r < n && differs < 0; r++) {
        if (all[r] == 0 || all[r] != all[0]) {
            differs = r;
            invalid_there = all[r] == 0;
        }
    }
    free(all);
    if (s != SHOAL_OK)
        return s;
    if (problem)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: %s", what, problem);
    if (differs >= 0) {
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: rank %d's options, count, dtype or layout %s", what,
                               differs,
                               invalid_there ? "are invalid there" : "differ from rank 0's");
    }
    shoal_compressor_t c;
    s = comp_new(comm, options, count, dtype, layout, &c);
    if (s != SHOAL_OK)
        return shoal_comm_fail(comm, s, "%s: %s", what,
                               s == SHOAL_ERR_NO_MEMORY ? "no memory" : "invalid layout");
    c->collective = 1;
    *comp_p = c;
    return SHOAL_OK;
}

shoal_status_t shoal_compressor_local(struct shoal_comm *comm,
                                      const shoal_compress_options_t *options, size_t count,
                                      shoal_dtype_t dtype, shoal_compressor_t *comp_p)
{
    if (!comm || !comp_p || options_problem(options, count, dtype, NULL))
        return SHOAL_ERR_INVALID_ARG;
    return comp_new(comm, options, count, dtype, NULL, comp_p);
}

static int comp_valid(shoal_compressor_t c)
{
    return c && c->magic == COMP_MAGIC;
}

shoal_status_t shoal_compressor_destroy(shoal_compressor_t comp)
{
    if (!comp_valid(comp) || atomic_load(&comp->busy))
        return SHOAL_ERR_INVALID_ARG;
    comp_free(comp);
    return SHOAL_OK;
}

/* Floats of each part of the state. */
static size_t state_nres(shoal_compressor_t c)
{
    return c->res ? c->nres : 0;
}

static size_t state_nq(shoal_compressor_t c)
{
    return c->psgd ? shoal_psgd_len2(c->psgd) : 0;
}

shoal_status_t shoal_compressor_state_size(shoal_compressor_t comp, size_t *bytes_p)
{
    if (!comp_valid(comp) || !bytes_p)
        return SHOAL_ERR_INVALID_ARG;
    *bytes_p = sizeof(state_head_t) + (state_nres(comp) + state_nq(comp)) * sizeof(float) +
               shoal_comp_adapt_state_bytes(comp);
    return SHOAL_OK;
}

shoal_status_t shoal_compressor_get_state(shoal_compressor_t comp, void *buf, size_t bytes)
{
    size_t need;
    if (shoal_compressor_state_size(comp, &need) != SHOAL_OK || !buf || bytes != need ||
        atomic_load(&comp->busy) || atomic_load(&comp->dev.lost))
        return SHOAL_ERR_INVALID_ARG;
    shoal_status_t s = shoal_comp_dev_pull(comp);
    if (s != SHOAL_OK)
        return s;
    state_head_t h = {.magic = STATE_MAGIC, .hash = comp->hash,
                      .nranks = (uint64_t)comp->nranks, .step = comp->step,
                      .nres = state_nres(comp), .nq = state_nq(comp),
                      .nadapt = shoal_comp_adapt_state_bytes(comp)};
    char *p = buf;
    memcpy(p, &h, sizeof(h));
    p += sizeof(h);
    if (h.nres)
        memcpy(p, comp->res, h.nres * sizeof(float));
    p += h.nres * sizeof(float);
    if (h.nq)
        memcpy(p, shoal_psgd_state(comp->psgd), h.nq * sizeof(float));
    p += h.nq * sizeof(float);
    if (h.nadapt)
        shoal_comp_adapt_save(comp, p);
    return SHOAL_OK;
}

shoal_status_t shoal_compressor_set_state(shoal_compressor_t comp, const void *buf,
                                          size_t bytes)
{
    size_t need;
    if (shoal_compressor_state_size(comp, &need) != SHOAL_OK || !buf || bytes != need ||
        atomic_load(&comp->busy))
        return SHOAL_ERR_INVALID_ARG;
    state_head_t h;
    const char *p = buf;
    memcpy(&h, p, sizeof(h));
    if (h.magic != STATE_MAGIC || h.hash != comp->hash ||
        h.nranks != (uint64_t)comp->nranks || h.nres != state_nres(comp) ||
        h.nq != state_nq(comp) || h.nadapt != shoal_comp_adapt_state_bytes(comp))
        return SHOAL_ERR_INVALID_ARG;
    p += sizeof(h);
    /* The adaptive record is checked first: nothing changes if it is
     * refused. */
    if (h.nadapt &&
        shoal_comp_adapt_load(comp, p + (h.nres + h.nq) * sizeof(float)) != SHOAL_OK)
        return SHOAL_ERR_INVALID_ARG;
    comp->step = h.step;
    if (h.nres)
        memcpy(comp->res, p, h.nres * sizeof(float));
    p += h.nres * sizeof(float);
    if (h.nq)
        memcpy(shoal_psgd_state(comp->psgd), p, h.nq * sizeof(float));
    return shoal_comp_dev_push(comp);
}

shoal_status_t shoal_compressor_reset(shoal_compressor_t comp)
{
    if (!comp_valid(comp) || atomic_load(&comp->busy))
        return SHOAL_ERR_INVALID_ARG;
    comp->step = 0;
    if (comp->res)
        memset(comp->res, 0, comp->nres * sizeof(float));
    if (comp->psgd)
        shoal_psgd_reset(comp->psgd);
    shoal_comp_adapt_reset(comp);
    return shoal_comp_dev_push(comp);
}

/* With add: PowerSGD's warm-up, the one step that still adds the residual
 * in a pass of its own. */
void shoal_comp_widen(float *dst, const void *src, size_t n, shoal_dtype_t dtype,
                      const float *add)
{
    if (dtype == SHOAL_FLOAT32) {
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = add ? s[i] + add[i] : s[i];
        return;
    }
    const uint16_t *h = src;
    for (size_t i = 0; i < n; i++) {
        float v = dtype == SHOAL_FLOAT16 ? shoal_f16_to_f32(h[i]) : shoal_bf16_to_f32(h[i]);
        dst[i] = add ? v + add[i] : v;
    }
}

void shoal_comp_narrow(void *dst, const float *src, size_t n, shoal_dtype_t dtype)
{
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++)
        h[i] = dtype == SHOAL_FLOAT16 ? shoal_f32_to_f16(src[i]) : shoal_f32_to_bf16(src[i]);
}

shoal_status_t shoal_comp_inner(struct shoal_comm *comm, const shoal_call_t *call,
                                const shoal_coll_args_t *args, unsigned sig_kind)
{
    shoal_call_t c = {.what = call->what, .args = *args, .sig_kind = sig_kind};
    return shoal_call_run(comm, &c);
}

/* One inner all-reduce (or, for the reduce-scatter, reduce-scatter) of
 * fp32 values; a codec's adds res_in to send as it encodes it and writes
 * the new residual into residual. */
static shoal_status_t inner_typed(struct shoal_comm *comm, const shoal_call_t *call,
                                  const void *send, void *recv, size_t count,
                                  shoal_dtype_t dtype, shoal_op_t op,
                                  const shoal_codec_t *codec, const float *res_in,
                                  float *residual)
{
    const shoal_compressor_t comp = call->comp;
    int rs = comp->opt.coll == SHOAL_COMPRESS_COLL_REDUCE_SCATTER && codec;
    shoal_coll_args_t args = {
        .kind = rs ? SHOAL_COLL_REDUCE_SCATTER : SHOAL_COLL_ALLREDUCE, .sendbuf = send,
        .recvbuf = recv, .count = count, .dtype = dtype, .op = op, .codec = codec,
        .residual = residual, .residual_in = res_in, .codec_algo = comp->opt.algo,
    };
    return shoal_comp_inner(comm, call, &args, codec ? 0 : SHOAL_SIG_COMPRESSOR);
}

static shoal_status_t inner(struct shoal_comm *comm, const shoal_call_t *call, const void *send,
                            void *recv, size_t count, shoal_op_t op, const shoal_codec_t *codec,
                            const float *res_in, float *residual)
{
    return inner_typed(comm, call, send, recv, count, SHOAL_FLOAT32, op, codec, res_in,
                       residual);
}

/* c->scales (this rank's block maxima) becomes the shared scales: their
 * max over the ranks, travelling as bf16 rounded up, so the all-reduce
 * that holds the wire back moves half the bytes of fp32 scales. A scale
 * grows by less than 2^-7 of itself, which leaves the codec unbiased. */
static shoal_status_t share_scales(struct shoal_comm *comm, const shoal_call_t *call,
                                   const shoal_comp_job_t *job)
{
    for (size_t b = 0; b < job->nblocks; b++)
        job->scales16[b] = shoal_comp_scale_bf16_up(job->scales[b]);
    shoal_status_t s = inner_typed(comm, call, job->scales16, job->scales16, job->nblocks,
                                   SHOAL_BFLOAT16, SHOAL_MAX, NULL, NULL, NULL);
    for (size_t b = 0; s == SHOAL_OK && b < job->nblocks; b++)
        job->scales[b] = shoal_bf16_to_f32(job->scales16[b]);
    return s;
}

/* x: the fp32 input; res_in, res: the last and the new residual (NULL
 * without error feedback). The input plus the residual is never written
 * out: the scales read both, and the codec adds them as it encodes. */
shoal_codec_t shoal_comp_job_codec(const struct shoal_compressor *c,
                                   const shoal_comp_job_t *job, int rank)
{
    const shoal_codec_ops_t *ops = job->kind == SHOAL_COMPRESS_SIGN      ? &shoal_codec_sign
                                   : job->kind == SHOAL_COMPRESS_INT4    ? &shoal_codec_int4
                                   : job->kind == SHOAL_COMPRESS_TERNARY ? &shoal_codec_ternary
                                                                         : &shoal_codec_int8;
    return (shoal_codec_t){
        .ops = ops, .block = job->block,
        .round = c->opt.stochastic || job->kind == SHOAL_COMPRESS_TERNARY
                     ? SHOAL_ROUND_STOCHASTIC : SHOAL_ROUND_NEAREST,
        .seed = shoal_comp_rank_seed(c, rank), .step = c->step,
    };
}

shoal_comp_job_t shoal_comp_own_job(struct shoal_compressor *c)
{
    return (shoal_comp_job_t){
        .kind = c->opt.kind, .block = c->opt.block, .count = c->count,
        .scales = c->scales, .scales16 = c->scales16, .nblocks = c->nblocks,
        .psgd = c->psgd, .buf1 = c->buf1, .buf2 = c->buf2, .x = c->x,
        .warmup = c->opt.warmup_steps,
    };
}

shoal_codec_t shoal_comp_codec(const struct shoal_compressor *c, int rank)
{
    shoal_comp_job_t job = {.kind = c->opt.kind, .block = c->opt.block};
    return shoal_comp_job_codec(c, &job, rank);
}

shoal_status_t shoal_comp_run_codec(struct shoal_comm *comm, const shoal_call_t *call,
                                    const shoal_comp_job_t *job, const float *x,
                                    const float *res_in, float *out, float *res)
{
    shoal_compressor_t c = call->comp;
    shoal_codec_t codec = shoal_comp_job_codec(c, job, comm->team.rank);
    if (job->kind == SHOAL_COMPRESS_TERNARY) {
        /* Shared scales: the largest (clipped) value of each block over the
         * ranks, as bf16 rounded up. */
        shoal_codec_block_absmax_sum(job->scales, x, res_in, job->count, job->block);
        float bound = shoal_codec_clip_bound_sum(x, res_in, job->count, c->opt.clip_sigma);
        for (size_t b = 0; bound > 0 && b < job->nblocks; b++)
            job->scales[b] = fminf(job->scales[b], bound);
        shoal_status_t s = share_scales(comm, call, job);
        if (s != SHOAL_OK)
            return s;
        /* Across hosts (hier-codec) each host compresses the sum of its
         * ranks, up to max_local times a rank's largest value: scales that
         * cover it, so that no host's sum is clipped. (With one rank per
         * host AUTO runs the flat ring, and the factor is 1.) */
        if (comm->team.nhosts > 1 && c->opt.algo == SHOAL_COMPRESS_ALGO_AUTO) {
            for (size_t b = 0; b < job->nblocks; b++)
                job->scales[b] *= (float)comm->team.cluster.max_local;
        }
        codec.scales = job->scales;
        /* A value's sum is within +-nranks: 4-bit codes up to 7 ranks,
         * 8-bit up to 127, 16-bit beyond. */
        codec.packed = comm->team.nranks <= 7;
        codec.wide = comm->team.nranks > 127;
    }
    return inner(comm, call, x, out, job->count, call->args.op, &codec, res_in, res);
}

/* m: the fp32 input; res_in, res as run_codec's.
 *
 * Passes over the tensor (count floats, each read or write of the whole
 * tensor one pass; P, Q and the panels of powersgd.c stay in cache; a
 * product with beta 0 has OpenBLAS clear its output first, a pass of its
 * own when the output is the tensor):
 * - before the fusion: x = m + r (read m, read r, write x: 3), P = x Q
 *   (read x: 1), Q = x^T P (read x: 1), residual = copy of x (read x,
 *   write r': 2), r' -= P Q^T / n (read and write r': 2), out = P Q^T
 *   (clear out, then read and write it: 3); 12 passes;
 * - fused (phase1_ef, and phase3 by panels): x = m + r with P = x Q in the
 *   same pass (read m, read r, write x: 3), Q = x^T P (read x: 1), then per
 *   panel the copy of x into r', the product into it and the product into
 *   out, all but the first touch in cache (read x, write r', write out: 3);
 *   7 passes. That is the floor of this schedule: m and r are read once
 *   (2), out and r' written once (2), and Q and the result need the
 *   tensor again after each of the two all-reduces (2 reads of x), so
 *   keeping the sum x (1 write) costs what reading m and r a second time
 *   would save. */
shoal_status_t shoal_comp_run_plain(struct shoal_comm *comm, const shoal_call_t *call,
                                    const shoal_comp_job_t *job, const float *m,
                                    const float *res_in, float *out, float *res)
{
    const float *x = m;
    if (res_in) {
        shoal_comp_widen(job->x, m, job->count, SHOAL_FLOAT32, res_in);
        x = job->x;
    }
    shoal_status_t s = inner(comm, call, x, out, job->count, call->args.op, NULL, NULL, NULL);
    if (s == SHOAL_OK && res)
        memset(res, 0, job->count * sizeof(float));
    return s;
}

shoal_status_t shoal_comp_run_powersgd(struct shoal_comm *comm, const shoal_call_t *call,
                                       const shoal_comp_job_t *job, const float *m,
                                       const float *res_in, float *out, float *res)
{
    shoal_compressor_t c = call->comp;
    int n = comm->team.nranks;
    /* Warm-up: a plain all-reduce of m + r, the sum written once for it. */
    if (c->step < job->warmup)
        return shoal_comp_run_plain(comm, call, job, m, res_in, out, res);
    const float *x = res_in ? job->x : m;
    shoal_psgd_phase1_ef(job->psgd, m, res_in, job->x, job->buf1);
    shoal_status_t s = inner(comm, call, job->buf1, job->buf1, shoal_psgd_len1(job->psgd),
                             SHOAL_SUM, NULL, NULL, NULL);
    if (s != SHOAL_OK)
        return s;
    shoal_psgd_phase2(job->psgd, x, job->buf1, job->buf2);
    s = inner(comm, call, job->buf2, job->buf2, shoal_psgd_len2(job->psgd), SHOAL_SUM, NULL,
              NULL, NULL);
    if (s != SHOAL_OK)
        return s;
    float scale = call->args.op == SHOAL_AVG ? 1.0f / (float)n : 1.0f;
    shoal_psgd_phase3(job->psgd, x, job->buf1, job->buf2, out, res, n, scale);
    return SHOAL_OK;
}

/* The run of c's collective and kind. */
static shoal_status_t run_kind(struct shoal_comm *comm, const shoal_call_t *call,
                               const float *x, const float *res_in, float *out, float *res)
{
    shoal_compressor_t c = call->comp;
    switch (c->opt.coll) {
    case SHOAL_COMPRESS_COLL_ALLGATHER:
        return shoal_comp_run_allgather(comm, call, x, res_in, out, res);
    case SHOAL_COMPRESS_COLL_ALLTOALL:
        return shoal_comp_run_alltoall(comm, call, x, out);
    default:
        break;
    }
    shoal_comp_job_t job = shoal_comp_own_job(c);
    switch (c->opt.kind) {
    case SHOAL_COMPRESS_POWERSGD:
        return shoal_comp_run_powersgd(comm, call, &job, x, res_in, out, res);
    case SHOAL_COMPRESS_MAJORITY:
        return shoal_comp_run_vote(comm, call, x, out);
    case SHOAL_COMPRESS_ADAPTIVE:
        return shoal_comp_run_adaptive(comm, call, x, res_in, out, res);
    default:
        return shoal_comp_run_codec(comm, call, &job, x, res_in, out, res);
    }
}

void shoal_comp_info_moved(const shoal_call_t *call, uint64_t sent, uint64_t received,
                           uint64_t step)
{
    const struct shoal_compressor *c = call->comp;
    if (!call->info)
        return;
    double n = c->nranks;
    double per = c->opt.coll == SHOAL_COMPRESS_COLL_ALLREDUCE ? 2 * (n - 1) / n : n - 1;
    double plain = per * (double)c->count * (double)shoal_dtype_bytes(c->dtype);
    *call->info = (shoal_compress_info_t){.bytes_sent = sent, .bytes_received = received,
                                          .ratio = sent ? plain / (double)sent : 0,
                                          .step = step, .error = shoal_comp_adapt_error(c)};
}

void shoal_comp_info(struct shoal_comm *comm, const shoal_call_t *call, uint64_t tx0,
                     uint64_t rx0, uint64_t step)
{
    shoal_comp_info_moved(call, comm->team.tx_bytes - tx0, comm->team.rx_bytes - rx0, step);
}

/* The call is over: its ticket, if still the compressor's, frees it for
 * the next call (a later call's ticket stays). A stream-ordered call holds
 * none, and touches nothing: its host may free the compressor as soon as
 * the stream has passed the call. */
static void comp_release(const shoal_call_t *call)
{
    uint_least64_t mine = call->comp_ticket;
    if (mine)
        atomic_compare_exchange_strong(&call->comp->busy, &mine, 0);
}

shoal_status_t shoal_compressor_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    shoal_compressor_t c = call->comp;
    const shoal_coll_args_t *a = &call->args;
    uint64_t tx0 = comm->team.tx_bytes, rx0 = comm->team.rx_bytes;
    /* The input: the buffer itself, or (float16, bfloat16) a widened copy.
     * The residual is not added here: the codecs add it piece by piece as
     * they encode, PowerSGD in its first product's pass, so no pass over
     * the tensor comes before the wire. */
    const float *x = a->sendbuf;
    if (c->dtype != SHOAL_FLOAT32) {
        shoal_comp_widen(c->x, a->sendbuf, c->nin, c->dtype, NULL);
        x = c->x;
    }
    float *out = c->out ? c->out : a->recvbuf;
    float *res = c->res ? c->res_next : NULL;
    shoal_status_t s = run_kind(comm, call, x, c->res, out, res);
    if (s == SHOAL_OK) {
        if (c->out)
            shoal_comp_narrow(a->recvbuf, c->out, c->nout, c->dtype);
        if (res) {
            c->res_next = c->res;
            c->res = res;
        }
        shoal_comp_info(comm, call, tx0, rx0, c->step);
        c->step++;
    }
    comp_release(call);
    return s;
}

/* A refusal of a call on c, on its communicator. */
static shoal_status_t comp_refuse(shoal_compressor_t c, const char *what, shoal_status_t st,
                                  const char *problem)
{
    shoal_status_t s = shoal_comm_enter_any(c->comm, what);
    if (s != SHOAL_OK)
        return s;
    s = shoal_comm_fail(c->comm, st, "%s: %s", what, problem);
    shoal_comm_leave(c->comm);
    return s;
}

static const char *const coll_names[] = {"all-reduce", "all-gather", "reduce-scatter",
                                          "all-to-all"};

/* Check and issue a call of collective coll on comp (nb: with a request;
 * on_stream: ordered with stream, its state on the device,
 * compressor_dev.c). */
static shoal_status_t comp_issue(const char *what, shoal_compress_coll_t coll,
                                 shoal_compressor_t c, const void *sendbuf, void *recvbuf,
                                 shoal_op_t op, shoal_compress_info_t *info, int nb,
                                 shoal_request_t *req_p, int on_stream, void *stream)
{
    static const shoal_coll_kind_t kinds[] = {SHOAL_COLL_ALLREDUCE, SHOAL_COLL_ALLGATHER,
                                              SHOAL_COLL_REDUCE_SCATTER, SHOAL_COLL_ALLTOALL};
    if (!comp_valid(c))
        return SHOAL_ERR_INVALID_ARG;
    struct shoal_comm *comm = c->comm;
    if (c->opt.coll != coll) {
        char why[96];
        snprintf(why, sizeof(why), "this compressor serves the %s, not the %s",
                 coll_names[c->opt.coll], coll_names[coll]);
        return comp_refuse(c, what, SHOAL_ERR_INVALID_ARG, why);
    }
    if (coll == SHOAL_COMPRESS_COLL_ALLGATHER || coll == SHOAL_COMPRESS_COLL_ALLTOALL)
        op = SHOAL_SUM; /* moves only */
    if (op != SHOAL_SUM && op != SHOAL_AVG) {
        char why[64];
        snprintf(why, sizeof(why), "compression takes sum and avg only, not op %d", (int)op);
        return comp_refuse(c, what, SHOAL_ERR_INVALID_ARG, why);
    }
    shoal_call_t call = {
        .what = what,
        .args = {.kind = kinds[coll], .sendbuf = sendbuf, .recvbuf = recvbuf,
                 .count = c->count, .dtype = c->dtype, .op = op},
        .comp = c,
        .run = shoal_compressor_run,
        .end = comp_release,
        .info = info,
        .on_stream = on_stream,
        .stream = stream,
    };
    shoal_status_t s;
    if (on_stream)
        return shoal_comp_dev_issue(c, &call);
    if (c->dev.ops)
        return comp_refuse(c, what, SHOAL_ERR_INVALID_ARG, "this compressor's state lives on "
                           "a device: its calls are stream-ordered "
                           "(shoal_allreduce_compressed_stream)");
    uint_least64_t none = 0;
    call.comp_ticket = atomic_fetch_add(&c->tickets, 1) + 1;
    if (!atomic_compare_exchange_strong(&c->busy, &none, call.comp_ticket))
        return comp_refuse(c, what, SHOAL_ERR_INVALID_ARG,
                           "a call on this compressor is still in flight");
    s = shoal_call_issue(comm, &call, nb, req_p);
    /* A call that was refused, or that moves nothing, never runs. */
    if (s != SHOAL_OK || c->count == 0) {
        if (s == SHOAL_OK && info)
            *info = (shoal_compress_info_t){.step = c->step};
        c->step += s == SHOAL_OK;
        comp_release(&call);
    }
    return s;
}

shoal_status_t shoal_allreduce_compressed(shoal_compressor_t comp, const void *sendbuf,
                                          void *recvbuf, shoal_op_t op,
                                          shoal_compress_info_t *info)
{
    return comp_issue("shoal_allreduce_compressed", SHOAL_COMPRESS_COLL_ALLREDUCE, comp,
                      sendbuf, recvbuf, op, info, 0, NULL, 0, NULL);
}

shoal_status_t shoal_iallreduce_compressed(shoal_compressor_t comp, const void *sendbuf,
                                           void *recvbuf, shoal_op_t op,
                                           shoal_compress_info_t *info, shoal_request_t *req_p)
{
    return comp_issue("shoal_iallreduce_compressed", SHOAL_COMPRESS_COLL_ALLREDUCE, comp,
                      sendbuf, recvbuf, op, info, 1, req_p, 0, NULL);
}

shoal_status_t shoal_allgather_compressed(shoal_compressor_t comp, const void *sendbuf,
                                          void *recvbuf, shoal_compress_info_t *info)
{
    return comp_issue("shoal_allgather_compressed", SHOAL_COMPRESS_COLL_ALLGATHER, comp,
                      sendbuf, recvbuf, SHOAL_SUM, info, 0, NULL, 0, NULL);
}

shoal_status_t shoal_iallgather_compressed(shoal_compressor_t comp, const void *sendbuf,
                                           void *recvbuf, shoal_compress_info_t *info,
                                           shoal_request_t *req_p)
{
    return comp_issue("shoal_iallgather_compressed", SHOAL_COMPRESS_COLL_ALLGATHER, comp,
                      sendbuf, recvbuf, SHOAL_SUM, info, 1, req_p, 0, NULL);
}

shoal_status_t shoal_reduce_scatter_compressed(shoal_compressor_t comp, const void *sendbuf,
                                               void *recvbuf, shoal_op_t op,
                                               shoal_compress_info_t *info)
{
    return comp_issue("shoal_reduce_scatter_compressed", SHOAL_COMPRESS_COLL_REDUCE_SCATTER,
                      comp, sendbuf, recvbuf, op, info, 0, NULL, 0, NULL);
}

shoal_status_t shoal_ireduce_scatter_compressed(shoal_compressor_t comp, const void *sendbuf,
                                                void *recvbuf, shoal_op_t op,
                                                shoal_compress_info_t *info,
                                                shoal_request_t *req_p)
{
    return comp_issue("shoal_ireduce_scatter_compressed", SHOAL_COMPRESS_COLL_REDUCE_SCATTER,
                      comp, sendbuf, recvbuf, op, info, 1, req_p, 0, NULL);
}

shoal_status_t shoal_alltoall_compressed(shoal_compressor_t comp, const void *sendbuf,
                                         void *recvbuf, shoal_compress_info_t *info)
{
    return comp_issue("shoal_alltoall_compressed", SHOAL_COMPRESS_COLL_ALLTOALL, comp,
                      sendbuf, recvbuf, SHOAL_SUM, info, 0, NULL, 0, NULL);
}

shoal_status_t shoal_ialltoall_compressed(shoal_compressor_t comp, const void *sendbuf,
                                          void *recvbuf, shoal_compress_info_t *info,
                                          shoal_request_t *req_p)
{
    return comp_issue("shoal_ialltoall_compressed", SHOAL_COMPRESS_COLL_ALLTOALL, comp,
                      sendbuf, recvbuf, SHOAL_SUM, info, 1, req_p, 0, NULL);
}

shoal_status_t shoal_allreduce_compressed_stream(shoal_compressor_t comp, const void *sendbuf,
                                                 void *recvbuf, shoal_op_t op,
                                                 shoal_compress_info_t *info, void *stream)
{
    return comp_issue("shoal_allreduce_compressed_stream", SHOAL_COMPRESS_COLL_ALLREDUCE, comp,
                      sendbuf, recvbuf, op, info, 0, NULL, 1, stream);
}

shoal_status_t shoal_allgather_compressed_stream(shoal_compressor_t comp, const void *sendbuf,
                                                 void *recvbuf, shoal_compress_info_t *info,
                                                 void *stream)
{
    return comp_issue("shoal_allgather_compressed_stream", SHOAL_COMPRESS_COLL_ALLGATHER, comp,
                      sendbuf, recvbuf, SHOAL_SUM, info, 0, NULL, 1, stream);
}

shoal_status_t shoal_reduce_scatter_compressed_stream(shoal_compressor_t comp,
                                                      const void *sendbuf, void *recvbuf,
                                                      shoal_op_t op, shoal_compress_info_t *info,
                                                      void *stream)
{
    return comp_issue("shoal_reduce_scatter_compressed_stream",
                      SHOAL_COMPRESS_COLL_REDUCE_SCATTER, comp, sendbuf, recvbuf, op, info, 0,
                      NULL, 1, stream);
}

shoal_status_t shoal_alltoall_compressed_stream(shoal_compressor_t comp, const void *sendbuf,
                                                void *recvbuf, shoal_compress_info_t *info,
                                                void *stream)
{
    return comp_issue("shoal_alltoall_compressed_stream", SHOAL_COMPRESS_COLL_ALLTOALL, comp,
                      sendbuf, recvbuf, SHOAL_SUM, info, 0, NULL, 1, stream);
}

shoal_status_t shoal_allreduce_int8(const void *sendbuf, void *recvbuf, size_t count,
                                    shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm,
                                    shoal_compress_info_t *info)
{
    const char *what = "shoal_allreduce_int8";
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_INT8);
    o.error_feedback = 0;
    const char *problem = options_problem(&o, count, dtype, NULL);
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    if (problem)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: %s", what, problem);
    else if (shoal_group_active())
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: not inside a group (use a "
                            "compressor without error feedback there)", what);
    shoal_comm_leave(comm);
    if (s != SHOAL_OK)
        return s;
    /* A compressor for this call only: nothing to agree on, nothing kept. */
    shoal_compressor_t c;
    s = comp_new(comm, &o, count, dtype, NULL, &c);
    if (s != SHOAL_OK)
        return shoal_comm_fail(comm, s, "%s: no memory", what);
    s = comp_issue(what, SHOAL_COMPRESS_COLL_ALLREDUCE, c, sendbuf, recvbuf, op, info, 0, NULL,
                   0, NULL);
    comp_free(c);
    return s;
}

size_t shoal_compressor_device_bytes(shoal_compressor_t comp)
{
    return comp_valid(comp) ? comp->dev.bytes : 0;
}

shoal_status_t shoal_compressor_residual(shoal_compressor_t comp, const float **res_p)
{
    if (!comp_valid(comp) || !res_p)
        return SHOAL_ERR_INVALID_ARG;
    shoal_status_t s = shoal_comp_dev_pull(comp);
    if (s != SHOAL_OK)
        return s;
    *res_p = comp->res;
    return SHOAL_OK;
}
