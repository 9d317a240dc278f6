/* Algorithm choice: a setting names one, otherwise the cost model picks. */
#include "algo.h"

#include "core/config.h"
#include "core/log.h"

#include <string.h>

static const shoal_algo_ops_t *const allreduce_algos[] = {
    &shoal_ring_allreduce_ops,
};
#define NALGOS (sizeof(allreduce_algos) / sizeof(allreduce_algos[0]))

const shoal_algo_ops_t *shoal_algo_select_allreduce(const struct shoal_comm *comm,
                                                    const shoal_coll_args_t *args)
{
    const char *want = shoal_config_get()->algo.algo;
    int forced = strcmp(want, "auto") != 0;
    const shoal_algo_ops_t *best = NULL;
    double best_cost = 0;
    for (size_t i = 0; i < NALGOS; i++) {
        const shoal_algo_ops_t *a = allreduce_algos[i];
        if (forced && strcmp(want, a->name))
            continue;
        double c = a->cost(comm, args);
        if (c >= 0 && (!best || c < best_cost)) {
            best = a;
            best_cost = c;
        }
    }
    if (!best)
        shoal_error(ALGO, "SHOAL_ALGO=%s names no all-reduce algorithm that can run here "
                    "(known: ring)", want);
    return best;
}
