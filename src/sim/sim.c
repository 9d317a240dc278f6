/* The simulator's engine: the made-up cluster, one dry communicator per
 * rank, and the scheduler that runs their fibers (sim.h). */
#include "sim_priv.h"

#include "base/config.h"
#include "base/dtype.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Deep enough for a schedule and the logging under it. */
#define SIM_STACK_BYTES (256u << 10)

shoal_status_t shoal_sim_config_init(shoal_sim_config_t *cfg, int nhosts, int per_host)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->nhosts = nhosts;
    cfg->per_host = per_host;
    shoal_links_defaults(&cfg->links);
    cfg->links.intra = SHOAL_LINK_SHM_SAME_NUMA;
    cfg->links.inter = SHOAL_LINK_TCP;
    return shoal_links_parse(shoal_config_get()->topo.links, &cfg->links);
}

/* The ready ranks form a binary heap on (clock, rank). */
static int heap_before(const shoal_sim_t *sim, int a, int b)
{
    double ta = sim->clock[a], tb = sim->clock[b];
    return ta < tb || (ta == tb && a < b);
}

static void heap_push(shoal_sim_t *sim, int r)
{
    int i = sim->nheap++;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (!heap_before(sim, r, sim->heap[up]))
            break;
        sim->heap[i] = sim->heap[up];
        i = up;
    }
    sim->heap[i] = r;
}

static int heap_pop(shoal_sim_t *sim)
{
    int top = sim->heap[0], last = sim->heap[--sim->nheap], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= sim->nheap)
            break;
        if (c + 1 < sim->nheap && heap_before(sim, sim->heap[c + 1], sim->heap[c]))
            c++;
        if (!heap_before(sim, sim->heap[c], last))
            break;
        sim->heap[i] = sim->heap[c];
        i = c;
    }
    sim->heap[i] = last;
    return top;
}

void shoal_sim_wake(shoal_sim_t *sim, int r)
{
    if (sim->state[r] != SIM_PARKED)
        return;
    sim->state[r] = SIM_READY;
    heap_push(sim, r);
}

void shoal_sim_defer(shoal_sim_t *sim, int r)
{
    while (sim->nheap > 0 && heap_before(sim, sim->heap[0], r)) {
        sim->state[r] = SIM_READY;
        heap_push(sim, r);
        shoal_fiber_yield(sim->fibers);
    }
}

void shoal_sim_set_codec(shoal_sim_t *sim, const shoal_codec_t *codec, int algo)
{
    sim->codec = codec;
    sim->codec_algo = algo;
}

int shoal_sim_nranks(const shoal_sim_t *sim)
{
    return sim->n;
}

shoal_team_t *shoal_sim_team(shoal_sim_t *sim, int rank)
{
    return &sim->ranks[rank].team;
}

/* The hooks of a simulated rank's team: no other rank fails behind its
 * back, and a failure's cause is kept for the simulator's message. */
static shoal_status_t sim_watch(shoal_team_t *team)
{
    return SHOAL_OK;
}

static void sim_cause(shoal_team_t *team, const char *text)
{
    shoal_sim_rank_t *rk = (shoal_sim_rank_t *)team;
    if (!rk->cause[0])
        snprintf(rk->cause, sizeof(rk->cause), "%s", text);
}

static shoal_status_t sim_mismatch(shoal_team_t *team, int peer, const void *hdr)
{
    sim_cause(team, "a piece of another operation arrived");
    return SHOAL_ERR_MISMATCH;
}

/* Simulated buffers are never registered: the put schedules fall back. */
static shoal_mem_t *sim_mem_of(shoal_team_t *team, int tl, const void *buf, size_t len)
{
    return NULL;
}

static const shoal_team_hooks_t sim_hooks = {
    .size = sizeof(shoal_team_hooks_t),
    .watch = sim_watch,
    .cause = sim_cause,
    .mismatch = sim_mismatch,
    .mem_of = sim_mem_of,
};

static void sim_rank_init(shoal_sim_t *sim, int r, size_t chunk)
{
    shoal_sim_rank_t *rk = &sim->ranks[r];
    shoal_team_t *c = &rk->team;
    rk->sim = sim;
    rk->rank = r;
    c->rank = r;
    c->nranks = sim->n;
    c->timeout_ns = 86400ull * 1000000000ull; /* waits end in the scheduler, not here */
    c->chunk_size = chunk;
    c->nhosts = sim->cfg.nhosts;
    c->cluster = sim->cluster; /* shared arrays: freed once, by the simulation */
    c->kern = &shoal_sim_dry_kernels;
    c->kern_ctx = &sim->dry_bytes[r];
    c->hooks = &sim_hooks;
    shoal_sim_ctx_t *ctx = &sim->ctxs[r];
    ctx->base.ops = &shoal_sim_ops;
    ctx->sim = sim;
    ctx->team = c;
    ctx->rank = r;
    c->tl_ctx[0] = &ctx->base;
    c->ntl = 1;
    c->eps = &sim->ep_ptrs[(size_t)r * sim->n];
    for (int b = 0; b < sim->n; b++) {
        shoal_ep_t *ep = &sim->eps[(size_t)r * sim->n + b];
        ep->ops = &shoal_sim_ops;
        ep->ctx = &ctx->base;
        ep->peer = b;
        c->eps[b] = b == r ? NULL : ep;
    }
    c->cost.links = sim->cfg.links;
    shoal_cost_flat(&c->cost, c->nhosts);
}

shoal_status_t shoal_sim_create(const shoal_sim_config_t *cfg, shoal_sim_t **sim_p)
{
    if (cfg->nhosts < 1 || cfg->per_host < 1 || cfg->numa_per_host < 0 ||
        (size_t)cfg->nhosts * cfg->per_host > (1u << 16)) {
        shoal_error(INIT, "simulation of %d hosts x %d ranks: need 1..65536 ranks",
                    cfg->nhosts, cfg->per_host);
        return SHOAL_ERR_INVALID_ARG;
    }
    const shoal_config_t *conf = shoal_config_get();
    shoal_sim_t *sim = calloc(1, sizeof(*sim));
    if (!sim)
        return SHOAL_ERR_NO_MEMORY;
    sim->cfg = *cfg;
    int n = sim->n = cfg->nhosts * cfg->per_host;
    size_t nn = (size_t)n * n;
    size_t chunk = cfg->chunk_size ? cfg->chunk_size : shoal_config_chunk(conf, cfg->nhosts > 1);
    sim->depth_intra = conf->shm.nslots ? conf->shm.nslots : SHOAL_SHM_NSLOTS_DEFAULT;
    sim->depth_inter = conf->tcp.nslots;
    sim->depth = sim->depth_intra > sim->depth_inter ? sim->depth_intra : sim->depth_inter;
    sim->host_of = malloc((size_t)n * sizeof(int));
    shoal_place_t *places = malloc((size_t)n * sizeof(*places));
    sim->ranks = calloc((size_t)n, sizeof(*sim->ranks));
    sim->ctxs = calloc((size_t)n, sizeof(*sim->ctxs));
    sim->eps = calloc(nn, sizeof(*sim->eps));
    sim->ep_ptrs = calloc(nn, sizeof(*sim->ep_ptrs));
    sim->posted = calloc(nn, sizeof(*sim->posted));
    sim->released = calloc(nn, sizeof(*sim->released));
    sim->touched = calloc(nn, 1);
    sim->slots = calloc(nn * sim->depth, sizeof(*sim->slots));
    sim->clock = calloc((size_t)n, sizeof(double));
    sim->next_arrive = malloc((size_t)n * sizeof(double));
    sim->poked = malloc((size_t)n * sizeof(double));
    sim->dry_bytes = calloc((size_t)n, sizeof(size_t));
    sim->out_free = calloc((size_t)cfg->nhosts, sizeof(double));
    sim->in_free = calloc((size_t)cfg->nhosts, sizeof(double));
    sim->state = calloc((size_t)n, 1);
    sim->active = calloc((size_t)n, 1);
    sim->heap = calloc((size_t)n, sizeof(int));
    sim->fibers = shoal_fibers_create(n, SIM_STACK_BYTES);
    sim->nomem_bytes = chunk;
    sim->nomem = mmap(NULL, chunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
    if (sim->nomem == MAP_FAILED)
        sim->nomem = NULL;
    if (!sim->host_of || !places || !sim->ranks || !sim->ctxs || !sim->eps || !sim->ep_ptrs ||
        !sim->posted || !sim->released || !sim->touched || !sim->slots || !sim->clock || !sim->next_arrive || !sim->poked || !sim->dry_bytes || !sim->out_free ||
        !sim->in_free || !sim->state || !sim->active || !sim->heap || !sim->fibers ||
        !sim->nomem) {
        free(places);
        shoal_sim_destroy(sim);
        shoal_error(MEM, "no memory for a simulation of %d ranks", n);
        return SHOAL_ERR_NO_MEMORY;
    }
    for (int r = 0; r < n; r++)
        sim->next_arrive[r] = sim->poked[r] = SIM_NEVER;
    int numa = cfg->numa_per_host > 1 ? cfg->numa_per_host : 0;
    for (int r = 0; r < n; r++) {
        int j = r % cfg->per_host;
        sim->host_of[r] = r / cfg->per_host;
        places[r] = (shoal_place_t){.numa = numa ? j * numa / cfg->per_host : -1,
                                    .gpu = -1, .nic = -1};
    }
    shoal_status_t s = shoal_cluster_build(&sim->cluster, n, sim->host_of, cfg->nhosts, places);
    free(places);
    if (s != SHOAL_OK) {
        shoal_sim_destroy(sim);
        return s;
    }
    if (sim->cluster.cross_numa && sim->cfg.links.intra == SHOAL_LINK_SHM_SAME_NUMA)
        sim->cfg.links.intra = SHOAL_LINK_SHM_CROSS_NUMA;
    for (int r = 0; r < n; r++)
        sim_rank_init(sim, r, chunk);
    *sim_p = sim;
    return SHOAL_OK;
}

void shoal_sim_destroy(shoal_sim_t *sim)
{
    if (!sim)
        return;
    for (int r = 0; sim->ranks && r < sim->n; r++) {
        for (int k = 0; k < SHOAL_ALGO_MEMO_KINDS; k++)
            shoal_plan_destroy(sim->ranks[r].team.plans[k]);
    }
    if (sim->nomem)
        munmap(sim->nomem, sim->nomem_bytes);
    shoal_fibers_destroy(sim->fibers);
    shoal_cluster_free(&sim->cluster);
    free(sim->heap);
    free(sim->active);
    free(sim->state);
    free(sim->in_free);
    free(sim->out_free);
    free(sim->clock);
    free(sim->next_arrive);
    free(sim->poked);
    free(sim->dry_bytes);
    free(sim->slots);
    free(sim->released);
    free(sim->touched);
    free(sim->posted);
    free(sim->ep_ptrs);
    free(sim->eps);
    free(sim->ctxs);
    free(sim->ranks);
    free(sim->host_of);
    free(sim);
}

/* What one rank runs. */
typedef struct {
    shoal_sim_t *sim;
    const shoal_algo_ops_t *algo;
    shoal_coll_args_t args;
    int rank;
    shoal_status_t status;
} sim_task_t;

static void sim_rank_main(void *arg)
{
    sim_task_t *t = arg;
    shoal_team_t *team = &t->sim->ranks[t->rank].team;
    shoal_plan_t *plan = NULL;
    t->status = shoal_plan_create(team, t->algo, &t->args, &plan);
    if (t->status == SHOAL_OK)
        t->status = shoal_plan_run(plan, &t->args);
    shoal_plan_destroy(plan);
    shoal_sim_charge(t->sim, t->rank);
}

/* Bytes of the send and receive buffers of a call, as algo.h lays them out. */
static void sim_buffers(shoal_coll_kind_t kind, size_t bytes, int n, size_t *send_p,
                        size_t *recv_p)
{
    size_t all = bytes * (size_t)n;
    *send_p = *recv_p = bytes;
    switch (kind) {
    case SHOAL_COLL_REDUCE_SCATTER:
    case SHOAL_COLL_SCATTER:
        *send_p = all;
        break;
    case SHOAL_COLL_ALLGATHER:
    case SHOAL_COLL_GATHER:
        *recv_p = all;
        break;
    case SHOAL_COLL_ALLTOALL:
        *send_p = *recv_p = all;
        break;
    default:
        break;
    }
}

/* Run every rank's fiber to its end, the ready rank with the earliest
 * clock first; when none is ready but some wait, the schedule deadlocked
 * and the waiting fail. */
static void sim_schedule(shoal_sim_t *sim)
{
    int left = sim->n;
    while (left > 0) {
        if (sim->nheap == 0) {
            int shown = 0;
            sim->deadlock = 1;
            for (int r = 0; r < sim->n; r++) {
                if (sim->state[r] == SIM_PARKED && shown++ < 8)
                    shoal_error(ALGO, "simulation: rank %d waits forever", r);
                shoal_sim_wake(sim, r);
            }
        }
        int r = heap_pop(sim);
        sim->state[r] = SIM_RUNNING;
        if (shoal_fiber_resume(sim->fibers, r)) {
            sim->state[r] = SIM_DONE;
            left--;
        }
    }
}

shoal_status_t shoal_sim_run(shoal_sim_t *sim, shoal_coll_kind_t kind, size_t count,
                             shoal_dtype_t dtype, const shoal_algo_ops_t *ops, double *time_p,
                             const char **algo_p)
{
    size_t es = shoal_dtype_bytes(dtype), sbytes, rbytes;
    if (es == 0 || kind >= SHOAL_COLL_SEND || kind == SHOAL_COLL_ALLTOALLV)
        return SHOAL_ERR_INVALID_ARG;
    int compressed = sim->codec &&
                     (kind == SHOAL_COLL_ALLREDUCE || kind == SHOAL_COLL_REDUCE_SCATTER);
    if (compressed && dtype != SHOAL_FLOAT32) {
        shoal_error(ALGO, "simulation: compressed reductions take float32, not %s",
                    shoal_dtype_name(dtype));
        return SHOAL_ERR_INVALID_ARG;
    }
    sim_buffers(kind, count * es, sim->n, &sbytes, &rbytes);
    /* The buffers (and a compressed call's residual, shaped as the input,
     * after them):
     * reserved, never readable, so a schedule that touched data in a dry
     * run would fault at once. */
    size_t page = 4096, rbase = (sbytes + page) / page * page;
    size_t resid = (rbase + rbytes + page) / page * page;
    size_t span = resid + (compressed ? sbytes + page : 0);
    span = (span + page - 1) / page * page;
    char *mem = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
        shoal_error(MEM, "simulation: no address space for %zu B of buffers", span);
        return SHOAL_ERR_NO_MEMORY;
    }
    shoal_coll_args_t args = {.kind = kind, .sendbuf = mem, .recvbuf = mem + rbase,
                              .count = count, .dtype = dtype, .op = SHOAL_SUM};
    if (compressed) {
        args.codec = sim->codec;
        args.codec_algo = sim->codec_algo;
        args.residual = (float *)(void *)(mem + resid);
        args.residual_in = args.residual; /* error feedback in place */
    }
    if (!ops)
        ops = compressed ? shoal_codec_algo_select(&sim->ranks[0].team, &args)
                         : shoal_algo_select(&sim->ranks[0].team, &args);
    shoal_status_t s = SHOAL_OK;
    sim_task_t *tasks = NULL;
    if (!ops || ops->cost(&sim->ranks[0].team, &args) < 0) {
        shoal_error(ALGO, "simulation: %s cannot serve %s on %d ranks", ops ? ops->name : "none",
                    shoal_coll_kind_name(kind), sim->n);
        s = SHOAL_ERR_INVALID_ARG;
        goto out;
    }
    tasks = calloc((size_t)sim->n, sizeof(*tasks));
    if (!tasks) {
        s = SHOAL_ERR_NO_MEMORY;
        goto out;
    }
    /* Every clock starts at the latest one: no link or slot is busy past it. */
    double t0 = 0;
    for (int r = 0; r < sim->n; r++)
        t0 = sim->clock[r] > t0 ? sim->clock[r] : t0;
    sim->nheap = 0;
    sim->deadlock = 0;
    for (int r = 0; r < sim->n; r++) {
        tasks[r] = (sim_task_t){.sim = sim, .algo = ops, .args = args, .rank = r};
        sim->clock[r] = t0;
        sim->active[r] = 0;
        sim->next_arrive[r] = sim->poked[r] = SIM_NEVER;
        sim->dry_bytes[r] = 0;
        sim->ranks[r].cause[0] = '\0';
        shoal_fiber_start(sim->fibers, r, sim_rank_main, &tasks[r]);
        sim->state[r] = SIM_PARKED;
        shoal_sim_wake(sim, r);
    }
    sim_schedule(sim);
    double end = t0;
    for (int r = 0; r < sim->n; r++) {
        if (tasks[r].status != SHOAL_OK && s == SHOAL_OK) {
            s = tasks[r].status;
            shoal_error(ALGO, "simulation: %s on rank %d: %s (%s)", ops->name, r,
                        shoal_status_string(s), sim->ranks[r].cause);
        }
        end = sim->clock[r] > end ? sim->clock[r] : end;
    }
    /* A failed schedule may leave pieces behind: the next starts empty. */
    if (s != SHOAL_OK) {
        memset(sim->posted, 0, (size_t)sim->n * sim->n * sizeof(*sim->posted));
        memset(sim->released, 0, (size_t)sim->n * sim->n * sizeof(*sim->released));
    }
    *time_p = end - t0;
    if (algo_p)
        *algo_p = ops->name;
out:
    free(tasks);
    munmap(mem, span);
    return s;
}
