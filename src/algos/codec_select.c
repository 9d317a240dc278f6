/* Which schedule a compressed all-reduce (or reduce-scatter, or
 * all-gather) runs. The cost model does not
 * choose: the schedules differ in how often a value is quantised, which
 * is the caller's trade (shoal_compress_algo_t), not only in time. Every
 * input of the choice (the request, the rank and host counts, the most
 * ranks on a host, the codec) is the same on every rank, so all ranks run
 * the same schedule. */
#include "algo.h"

#include "base/log.h"

/* The ring requantises a partial sum at each of its n-1 hops; up to this
 * many ranks its error stays within a few quantisations. */
#define CODEC_RING_MAX_RANKS 8

const shoal_algo_ops_t *shoal_codec_algo_select(const shoal_team_t *team,
                                                const shoal_coll_args_t *args)
{
    const shoal_codec_t *c = args->codec;
    const shoal_algo_ops_t *algo = NULL;
    const char *why = "requested";
    /* A contribution quantised once to its owner, or requantised at each
     * hop of the ring, as asked; unasked, across hosts with several ranks
     * on one, the host's sum quantised once to its owner (the hierarchy's
     * rails run the two-shot). */
    /* Each shard encoded once, its wire forwarded round the ring. */
    if (args->kind == SHOAL_COLL_ALLGATHER) {
        shoal_info(ALGO, "compressed all-gather of %zu x %s on %d ranks: %s", args->count,
                   c->ops->name, team->nranks, shoal_ring_codec_ag_ops.name);
        return &shoal_ring_codec_ag_ops;
    }
    if (args->kind == SHOAL_COLL_REDUCE_SCATTER) {
        if (args->codec_algo == SHOAL_COMPRESS_ALGO_RING)
            algo = &shoal_ring_codec_rs_ops;
        else if (args->codec_algo == SHOAL_COMPRESS_ALGO_AUTO && team->nhosts > 1 &&
                 team->cluster.max_local > 1)
            algo = &shoal_hier_codec_rs_ops;
        else
            algo = &shoal_twoshot_codec_rs_ops;
        shoal_info(ALGO, "compressed reduce-scatter of %zu x %s on %d ranks (%d hosts): %s",
                   args->count, c->ops->name, team->nranks, team->nhosts, algo->name);
        return algo;
    }
    switch (args->codec_algo) {
    case SHOAL_COMPRESS_ALGO_RING:
        algo = &shoal_ring_codec_allreduce_ops;
        break;
    case SHOAL_COMPRESS_ALGO_TWO_SHOT:
        algo = &shoal_twoshot_codec_allreduce_ops;
        break;
    case SHOAL_COMPRESS_ALGO_TREE:
        algo = &shoal_tree_codec_allreduce_ops;
        break;
    case SHOAL_COMPRESS_ALGO_AUTO:
        /* With one rank on every host the hierarchy has nothing to do
         * inside a host: its rail is the flat ring, which it would only
         * precede with a copy of the input (plus the residual) into the
         * output, a pass over the tensor before the wire. */
        if (team->nhosts > 1 && team->cluster.max_local > 1 &&
            (c->ops == &shoal_codec_int8 || c->ops == &shoal_codec_ternary)) {
            algo = &shoal_hier_codec_allreduce_ops;
            why = "several hosts";
        } else if (c->ops == &shoal_codec_ternary) {
            algo = &shoal_ring_codec_allreduce_ops;
            why = "exact sums of shared scales";
        } else if (c->ops != &shoal_codec_int8) {
            /* Signs and 4 bits lose too much to be requantised per hop. */
            algo = &shoal_twoshot_codec_allreduce_ops;
            why = "one quantisation of each contribution";
        } else {
            int ring = team->nranks <= CODEC_RING_MAX_RANKS;
            algo = ring ? &shoal_ring_codec_allreduce_ops : &shoal_twoshot_codec_allreduce_ops;
            why = ring ? "few ranks" : "many ranks";
        }
        break;
    default:
        shoal_error(ALGO, "compressed allreduce: unknown schedule %d", args->codec_algo);
        return NULL;
    }
    shoal_info(ALGO, "compressed allreduce of %zu x %s on %d ranks (%d hosts): %s (%s)",
               args->count, c->ops->name, team->nranks, team->nhosts, algo->name, why);
    return algo;
}
