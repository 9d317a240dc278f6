/* The part of every plan that depends only on the call's type. */
#include "algo.h"

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
    if (reduces && !(p->reduce = shoal_reduce_fn(args->dtype, args->op)))
        return SHOAL_ERR_INTERNAL;
    return plan->piece_elems ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}
