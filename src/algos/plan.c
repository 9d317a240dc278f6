/* The part of every plan that depends only on the call's type. */
#include "algo.h"
#include "stage.h"

#include "base/dtype.h"

#include <string.h>

shoal_status_t shoal_plan_init(struct shoal_comm *comm, const shoal_coll_args_t *args,
                               int reduces, shoal_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
    plan->args = *args;
    plan->esize = shoal_dtype_bytes(args->dtype);
    if (plan->esize == 0)
        return SHOAL_ERR_INTERNAL;
    plan->piece_elems = comm->chunk_size / plan->esize;
    shoal_prims_t *p = &plan->prims;
    p->comm = comm;
    p->dtype = args->dtype;
    p->esize = plan->esize;
    p->st = &shoal_stage_plain;
    plan->stage_elems = plan->piece_elems;
    if (reduces && !(p->reduce = shoal_reduce_fn(args->dtype, args->op)))
        return SHOAL_ERR_INTERNAL;
    return plan->piece_elems ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}

shoal_status_t shoal_plan_stage(struct shoal_comm *comm, const shoal_coll_args_t *args,
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
    plan->stage_elems = p->st->piece_elems(p, comm->chunk_size);
    return plan->stage_elems ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}
