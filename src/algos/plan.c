/* Plans: the part of every plan that depends only on the call's type,
 * the stage it runs, and the lifecycle of plans (create, run, destroy,
 * the communicator's cache of them, their memory). */
#include "algo.h"
#include "stage.h"

#include "base/config.h"
#include "base/dtype.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

shoal_status_t shoal_plan_init(shoal_team_t *team, const shoal_coll_args_t *args,
                               int reduces, shoal_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
    plan->args = *args;
    plan->esize = shoal_dtype_bytes(args->dtype);
    if (plan->esize == 0)
        return SHOAL_ERR_INTERNAL;
    plan->piece_elems = team->chunk_size / plan->esize;
    shoal_prims_t *p = &plan->prims;
    p->team = team;
    p->dtype = args->dtype;
    p->esize = plan->esize;
    p->st = &shoal_stage_plain;
    plan->stage_elems = plan->piece_elems;
    if (reduces && !(p->reduce = shoal_reduce_fn(args->dtype, args->op)))
        return SHOAL_ERR_INTERNAL;
    return plan->piece_elems ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}

shoal_status_t shoal_plan_stage(shoal_team_t *team, const shoal_coll_args_t *args,
                                shoal_plan_t *plan)
{
    shoal_prims_t *p = &plan->prims;
    if (!args->codec)
        return SHOAL_OK;
    if (args->dtype != SHOAL_FLOAT32)
        return SHOAL_ERR_INTERNAL;
    p->st = &shoal_stage_codec;
    p->codec = args->codec;
    p->residual = args->residual;
    p->addend = args->residual_in;
    plan->stage_elems = p->st->piece_elems(p, team->chunk_size);
    return plan->stage_elems ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}

void shoal_plan_reserve(shoal_plan_t *plan, size_t bytes)
{
    if (bytes > plan->scratch_bytes)
        plan->scratch_bytes = bytes;
}

shoal_status_t shoal_plan_scratch(shoal_plan_t *plan, size_t bytes, void **buf_p)
{
    if (bytes > plan->scratch_bytes) {
        shoal_error(ALGO, "rank %d: %s asks %zu B of working memory; its plan reserved %zu",
                    plan->prims.team->rank, plan->algo->name, bytes, plan->scratch_bytes);
        return SHOAL_ERR_INTERNAL;
    }
    *buf_p = plan->scratch;
    return SHOAL_OK;
}

static size_t line_up(size_t bytes)
{
    return (bytes + 63) / 64 * 64;
}

/* The plan's block: the staged input, then the working memory, each on
 * 64-byte lines for the kernels; registered with every open transport. */
static shoal_status_t plan_mem_take(shoal_team_t *team, shoal_plan_t *plan)
{
    size_t in = line_up(plan->args.stage_bytes), total = in + line_up(plan->scratch_bytes);
    if (total == 0)
        return SHOAL_OK;
    plan->mem = aligned_alloc(64, total);
    if (!plan->mem) {
        shoal_error(MEM, "rank %d: no memory for the %zu B of a %s plan", team->rank, total,
                    plan->algo->name);
        return SHOAL_ERR_NO_MEMORY;
    }
    plan->mem_bytes = total;
    plan->input = plan->args.stage_bytes ? plan->mem : NULL;
    plan->scratch = plan->scratch_bytes ? (char *)plan->mem + in : NULL;
    for (int t = 0; t < team->ntl && t < SHOAL_MAX_TRANSPORTS; t++) {
        shoal_tl_ctx_t *ctx = team->tl_ctx[t];
        /* One that declines moves the plan's memory through its slots. */
        if (ctx && ctx->ops->mem_reg(ctx, plan->mem, total, SHOAL_MEM_HOST, &plan->reg[t]) !=
                       SHOAL_OK)
            plan->reg[t] = NULL;
    }
    return SHOAL_OK;
}

static void plan_mem_release(shoal_plan_t *plan)
{
    shoal_team_t *team = plan->prims.team;
    for (int t = 0; t < SHOAL_MAX_TRANSPORTS; t++) {
        if (plan->reg[t] && t < team->ntl && team->tl_ctx[t])
            team->tl_ctx[t]->ops->mem_dereg(team->tl_ctx[t], plan->reg[t]);
        plan->reg[t] = NULL;
    }
    free(plan->mem);
    plan->mem = NULL;
}

shoal_status_t shoal_plan_create(shoal_team_t *team, const shoal_algo_ops_t *algo,
                                 const shoal_coll_args_t *args, shoal_plan_t **plan_p)
{
    shoal_plan_t *plan = malloc(sizeof(*plan));
    if (!plan) {
        shoal_error(MEM, "rank %d: no memory for a plan", team->rank);
        return SHOAL_ERR_NO_MEMORY;
    }
    /* The algorithm's plan starts from a zeroed struct (shoal_plan_init),
     * so the lifecycle fields start empty; it sets scratch_bytes. */
    shoal_status_t s = algo->plan(team, args, plan);
    if (s == SHOAL_OK) {
        plan->algo = algo;
        plan->settings = shoal_config_generation();
        plan->args.stage_bytes = args->stage_bytes;
        if (args->codec)
            plan->codec_shape = *args->codec;
        s = plan_mem_take(team, plan);
    }
    if (s != SHOAL_OK) {
        free(plan);
        return s;
    }
    *plan_p = plan;
    return SHOAL_OK;
}

shoal_status_t shoal_plan_run(shoal_plan_t *plan, const shoal_coll_args_t *args)
{
    plan->args = *args;
    if (args->stage_bytes) {
        if (!args->sendbuf)
            plan->args.sendbuf = plan->input;
        if (!args->recvbuf)
            plan->args.recvbuf = plan->input;
    }
    plan->prims.codec = args->codec;
    plan->prims.residual = args->residual;
    plan->prims.addend = args->residual_in;
    return plan->algo->run(plan);
}

void shoal_plan_destroy(shoal_plan_t *plan)
{
    if (!plan)
        return;
    shoal_plan_destroy(plan->fallback);
    plan_mem_release(plan);
    free(plan);
}

/* Whether plan was made for a call of args' shape: everything a plan
 * function reads (not the buffers; of a codec, what sizes its pieces). */
static int plan_fits(const shoal_plan_t *plan, const shoal_algo_ops_t *algo,
                     const shoal_coll_args_t *args, unsigned settings)
{
    const shoal_coll_args_t *a = &plan->args;
    if (plan->algo != algo || plan->settings != settings || a->kind != args->kind ||
        a->count != args->count || a->dtype != args->dtype || a->op != args->op ||
        a->root != args->root || a->codec_algo != args->codec_algo ||
        a->stage_bytes != args->stage_bytes || !a->codec != !args->codec)
        return 0;
    const shoal_codec_t *c = &plan->codec_shape, *d = args->codec;
    return !d || (c->ops == d->ops && c->block == d->block && c->wide == d->wide &&
                  c->packed == d->packed);
}

shoal_status_t shoal_plan_get(shoal_team_t *team, const shoal_algo_ops_t *algo,
                              const shoal_coll_args_t *args, shoal_plan_t **plan_p,
                              int *cached_p)
{
    unsigned settings = shoal_config_generation();
    int cache = args->sendcounts == NULL && (unsigned)args->kind < SHOAL_ALGO_MEMO_KINDS;
    shoal_plan_t **slot = cache ? &team->plans[args->kind] : NULL;
    *cached_p = cache;
    if (slot && *slot && plan_fits(*slot, algo, args, settings)) {
        *plan_p = *slot;
        return SHOAL_OK;
    }
    shoal_plan_t *plan;
    shoal_status_t s = shoal_plan_create(team, algo, args, &plan);
    if (s != SHOAL_OK)
        return s;
    if (slot) {
        shoal_plan_destroy(*slot);
        *slot = plan;
    }
    *plan_p = plan;
    return SHOAL_OK;
}

void shoal_plan_cache_release(shoal_team_t *team)
{
    for (int k = 0; k < SHOAL_ALGO_MEMO_KINDS; k++) {
        shoal_plan_destroy(team->plans[k]);
        team->plans[k] = NULL;
    }
}
