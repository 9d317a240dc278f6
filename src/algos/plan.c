/* Plans: the part of every plan that depends only on the call's type,
 * the stage it runs, and the lifecycle of plans (create, run, destroy,
 * the communicator's cache of them). */
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
    plan->stage_elems = p->st->piece_elems(p, team->chunk_size);
    return plan->stage_elems ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}

shoal_status_t shoal_plan_scratch(shoal_plan_t *plan, size_t bytes, void **buf_p)
{
    if (bytes > plan->scratch_bytes) {
        /* 64-byte lines for the kernels; the old contents are not kept. */
        void *mem = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!mem) {
            shoal_error(MEM, "rank %d: no memory for %zu B of working space",
                        plan->prims.team->rank, bytes);
            return SHOAL_ERR_NO_MEMORY;
        }
        free(plan->scratch);
        plan->scratch = mem;
        plan->scratch_bytes = bytes;
    }
    *buf_p = plan->scratch;
    return SHOAL_OK;
}

shoal_status_t shoal_plan_create(shoal_team_t *team, const shoal_algo_ops_t *algo,
                                 const shoal_coll_args_t *args, shoal_plan_t **plan_p)
{
    shoal_plan_t *plan = malloc(sizeof(*plan));
    if (!plan) {
        shoal_error(MEM, "rank %d: no memory for a plan", team->rank);
        return SHOAL_ERR_NO_MEMORY;
    }
    shoal_status_t s = algo->plan(team, args, plan);
    if (s != SHOAL_OK) {
        free(plan);
        return s;
    }
    /* The algorithm's plan starts from a zeroed struct (shoal_plan_init):
     * the lifecycle fields come after it. */
    plan->algo = algo;
    plan->settings = shoal_config_generation();
    plan->scratch = NULL;
    plan->scratch_bytes = 0;
    plan->fallback = NULL;
    plan->skip = plan->skip_len = 0;
    *plan_p = plan;
    return SHOAL_OK;
}

shoal_status_t shoal_plan_run(shoal_plan_t *plan, const shoal_coll_args_t *args)
{
    plan->args = *args;
    plan->prims.codec = args->codec;
    plan->prims.residual = args->residual;
    return plan->algo->run(plan);
}

void shoal_plan_destroy(shoal_plan_t *plan)
{
    if (!plan)
        return;
    shoal_plan_destroy(plan->fallback);
    free(plan->scratch);
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
        !a->codec != !args->codec)
        return 0;
    const shoal_codec_t *c = a->codec, *d = args->codec;
    return !c || (c->ops == d->ops && c->block == d->block && c->wide == d->wide &&
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
