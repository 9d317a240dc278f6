/* Algorithm choice: the cost model picks the cheapest algorithm that can
 * serve a call; SHOAL_ALGO forces one per collective. */
#include "algo.h"

#include "base/config.h"
#include "base/dtype.h"
#include "base/log.h"

#include <string.h>

#define MAX_ALGOS 6

/* Per collective, in order of preference when costs tie. */
static const shoal_algo_ops_t *const algos[SHOAL_COLL_KIND_COUNT][MAX_ALGOS] = {
    [SHOAL_COLL_ALLREDUCE] = {&shoal_ring_allreduce_ops, &shoal_rhd_allreduce_ops,
                              &shoal_tree_allreduce_ops, &shoal_oneshot_allreduce_ops,
                              &shoal_hier_allreduce_ops, &shoal_put_allreduce_ops},
    [SHOAL_COLL_REDUCE_SCATTER] = {&shoal_ring_reduce_scatter_ops, &shoal_rhd_reduce_scatter_ops,
                                   &shoal_hier_reduce_scatter_ops, &shoal_put_reduce_scatter_ops},
    [SHOAL_COLL_ALLGATHER] = {&shoal_ring_allgather_ops, &shoal_rhd_allgather_ops,
                              &shoal_hier_allgather_ops, &shoal_put_allgather_ops},
    [SHOAL_COLL_BROADCAST] = {&shoal_chain_broadcast_ops, &shoal_binomial_broadcast_ops,
                              &shoal_hier_broadcast_ops, &shoal_put_broadcast_ops},
    [SHOAL_COLL_REDUCE] = {&shoal_chain_reduce_ops, &shoal_binomial_reduce_ops},
    [SHOAL_COLL_ALLTOALL] = {&shoal_pairwise_alltoall_ops, &shoal_direct_alltoall_ops,
                             &shoal_hier_alltoall_ops, &shoal_put_alltoall_ops},
    [SHOAL_COLL_ALLTOALLV] = {&shoal_pairwise_alltoall_ops, &shoal_direct_alltoall_ops},
    [SHOAL_COLL_GATHER] = {&shoal_direct_gather_ops, &shoal_ring_gather_ops,
                            &shoal_put_gather_ops},
    [SHOAL_COLL_SCATTER] = {&shoal_direct_scatter_ops, &shoal_ring_scatter_ops,
                             &shoal_put_scatter_ops},
    [SHOAL_COLL_SEND] = {&shoal_p2p_ops},
    [SHOAL_COLL_RECV] = {&shoal_p2p_ops},
};

static const char *const kind_names[SHOAL_COLL_KIND_COUNT] = {
    [SHOAL_COLL_ALLREDUCE] = "allreduce", [SHOAL_COLL_REDUCE_SCATTER] = "reducescatter",
    [SHOAL_COLL_ALLGATHER] = "allgather", [SHOAL_COLL_BROADCAST] = "broadcast",
    [SHOAL_COLL_REDUCE] = "reduce",       [SHOAL_COLL_ALLTOALL] = "alltoall",
    [SHOAL_COLL_ALLTOALLV] = "alltoallv", [SHOAL_COLL_GATHER] = "gather",
    [SHOAL_COLL_SCATTER] = "scatter",     [SHOAL_COLL_SEND] = "send",
    [SHOAL_COLL_RECV] = "recv",
};

const char *shoal_coll_kind_name(shoal_coll_kind_t kind)
{
    return (unsigned)kind < SHOAL_COLL_KIND_COUNT ? kind_names[kind] : "unknown";
}

double shoal_algo_bytes(const shoal_coll_args_t *args, size_t n)
{
    return (double)n * (double)shoal_dtype_bytes(args->dtype);
}

const shoal_algo_ops_t *shoal_algo_at(shoal_coll_kind_t kind, int i)
{
    if ((unsigned)kind >= SHOAL_COLL_KIND_COUNT || i < 0 || i >= MAX_ALGOS)
        return NULL;
    return algos[kind][i];
}

const shoal_algo_ops_t *shoal_algo_find(shoal_coll_kind_t kind, const char *name)
{
    if ((unsigned)kind >= SHOAL_COLL_KIND_COUNT)
        return NULL;
    for (int i = 0; i < MAX_ALGOS && algos[kind][i]; i++) {
        if (!strcmp(algos[kind][i]->name, name))
            return algos[kind][i];
    }
    return NULL;
}

/* Walks SHOAL_ALGO: "auto", "name", or "coll:name,...". For each item, calls
 * visit(kind or -1 for every kind, name, len, ctx); stops at the first
 * nonzero return. Returns -1 for a malformed or unknown collective. */
typedef int (*algo_visit_fn)(int kind, const char *name, size_t len, void *ctx);

static int kind_by_name(const char *s, size_t len)
{
    if (len == 3 && !strncmp(s, "all", 3))
        return -1;
    for (int k = 0; k < SHOAL_COLL_KIND_COUNT; k++) {
        if (strlen(kind_names[k]) == len && !strncmp(kind_names[k], s, len))
            return k;
    }
    return -2;
}

static int setting_walk(const char *text, algo_visit_fn visit, void *ctx)
{
    if (!strcmp(text, "auto") || !*text)
        return 0;
    const char *item = text;
    while (*item) {
        size_t len = strcspn(item, ",");
        const char *colon = memchr(item, ':', len);
        int kind = -1;
        const char *name = item;
        size_t nlen = len;
        if (colon) {
            kind = kind_by_name(item, (size_t)(colon - item));
            if (kind == -2) {
                shoal_error(ALGO, "SHOAL_ALGO=%s: unknown collective '%.*s'", text,
                            (int)(colon - item), item);
                return -1;
            }
            name = colon + 1;
            nlen = len - (size_t)(name - item);
        }
        int r = visit(kind, name, nlen, ctx);
        if (r)
            return r;
        item += len;
        if (*item == ',')
            item++;
    }
    return 0;
}

/* An algorithm of kind named name[0..len). */
static const shoal_algo_ops_t *find_n(int kind, const char *name, size_t len)
{
    for (int i = 0; i < MAX_ALGOS && algos[kind][i]; i++) {
        const char *an = algos[kind][i]->name;
        if (strlen(an) == len && !strncmp(an, name, len))
            return algos[kind][i];
    }
    return NULL;
}

static int check_visit(int kind, const char *name, size_t len, void *ctx)
{
    const char *text = ctx;
    int found = 0;
    for (int k = 0; k < SHOAL_COLL_KIND_COUNT; k++) {
        if ((kind < 0 || kind == k) && find_n(k, name, len))
            found = 1;
    }
    if (len == 4 && !strncmp(name, "auto", 4))
        found = 1;
    if (!found) {
        shoal_error(ALGO, "SHOAL_ALGO=%s: no %s algorithm is named '%.*s' (shoal_info -a lists them)",
                    text, kind < 0 ? "" : kind_names[kind], (int)len, name);
        return -1;
    }
    return 0;
}

shoal_status_t shoal_algo_check_setting(void)
{
    const char *text = shoal_config_get()->algo.algo;
    return setting_walk(text, check_visit, (void *)text) ? SHOAL_ERR_INVALID_ARG : SHOAL_OK;
}

typedef struct {
    int kind;
    const shoal_algo_ops_t *forced; /* last item that names an algorithm of kind */
    int auto_named;
} forced_ctx_t;

static int forced_visit(int kind, const char *name, size_t len, void *ctx)
{
    forced_ctx_t *f = ctx;
    if (kind >= 0 && kind != f->kind)
        return 0;
    if (len == 4 && !strncmp(name, "auto", 4)) {
        f->forced = NULL;
        return 0;
    }
    const shoal_algo_ops_t *a = find_n(f->kind, name, len);
    if (a)
        f->forced = a;
    return 0;
}

const shoal_algo_ops_t *shoal_algo_select(const shoal_team_t *team,
                                          const shoal_coll_args_t *args)
{
    if ((unsigned)args->kind >= SHOAL_COLL_KIND_COUNT)
        return NULL;
    const char *text = shoal_config_get()->algo.algo;
    forced_ctx_t f = {.kind = (int)args->kind};
    if (setting_walk(text, forced_visit, &f) == 0 && f.forced) {
        double c = f.forced->cost(team, args);
        if (c >= 0) {
            shoal_info(ALGO, "%s of %zu x %s on %d ranks: %s (forced), est. %.1f us",
                       kind_names[args->kind], args->count, shoal_dtype_name(args->dtype),
                       team->nranks, f.forced->name, c * 1e6);
            return f.forced;
        }
        shoal_warn(ALGO, "SHOAL_ALGO forces %s for %s, which cannot serve %zu x %s on %d ranks; "
                   "the cost model chooses instead", f.forced->name, kind_names[args->kind],
                   args->count, shoal_dtype_name(args->dtype), team->nranks);
    }
    const shoal_algo_ops_t *best = NULL;
    double best_cost = 0;
    for (int i = 0; i < MAX_ALGOS && algos[args->kind][i]; i++) {
        const shoal_algo_ops_t *a = algos[args->kind][i];
        double c = a->cost(team, args);
        if (c >= 0 && (!best || c < best_cost)) {
            best = a;
            best_cost = c;
        }
    }
    if (best)
        shoal_info(ALGO, "%s of %zu x %s on %d ranks: %s, est. %.1f us", kind_names[args->kind],
                   args->count, shoal_dtype_name(args->dtype), team->nranks, best->name,
                   best_cost * 1e6);
    else
        shoal_error(ALGO, "no %s algorithm can serve %zu x %s on %d ranks",
                    kind_names[args->kind], args->count, shoal_dtype_name(args->dtype),
                    team->nranks);
    return best;
}

_Static_assert(SHOAL_COLL_KIND_COUNT <= SHOAL_ALGO_MEMO_KINDS, "raise SHOAL_ALGO_MEMO_KINDS");

const shoal_algo_ops_t *shoal_algo_choose(shoal_team_t *team, const shoal_coll_args_t *args)
{
    /* While choices are logged each call makes its own, so that the log
     * says what every call runs; the -v collectives' costs read their
     * count arrays. */
    int logged = SHOAL_LOG_INFO <= shoal_log_level && (SHOAL_SUBSYS(ALGO) & shoal_log_subsys);
    if ((unsigned)args->kind >= SHOAL_COLL_KIND_COUNT || args->sendcounts || logged)
        return shoal_algo_select(team, args);
    shoal_algo_memo_t *m = &team->memo[args->kind];
    unsigned settings = shoal_config_generation();
    if (m->algo && m->count == args->count && m->dtype == (int)args->dtype &&
        m->op == (int)args->op && m->root == args->root && m->settings == settings)
        return m->algo;
    const shoal_algo_ops_t *a = shoal_algo_select(team, args);
    if (a)
        *m = (shoal_algo_memo_t){.algo = a, .count = args->count, .dtype = (int)args->dtype,
                                 .op = (int)args->op, .root = args->root,
                                 .settings = settings};
    return a;
}
