/* The direct path of stream-ordered calls: ranks of one host move device
 * data device to device through CUDA memory handles, and reduce it with
 * the module's kernels, so no byte of it crosses host memory.
 *
 * The host side of such a call (call->run, on the executor, once its
 * stream reached the call: dev_stage.h) works as follows.
 * 1. Each rank exports the allocations of its buffers and the ranks
 *    exchange the handles with an all-gather (which is also the start
 *    barrier: every rank's input is ready once all have arrived).
 * 2. Each rank opens its peers' allocations (a cache per communicator, see
 *    below), and a MIN all-reduce tells whether every rank could. Where a
 *    rank cannot (a buffer not in device memory, no peer access between
 *    the devices, an export refused), every rank stages the call through
 *    host memory instead, logged once.
 * 3. The schedule reads peers' memory on this rank's own stream:
 *    - all-reduce: rank r reduces block r of every rank's input into its
 *      output (starting from its own input, so that in place is safe: the
 *      peers read only their own block of it), a barrier, then copies
 *      block s of rank s's output for every s, and a final barrier so that
 *      no rank lets its stream touch its buffers while others still read
 *      them;
 *    - reduce-scatter: the first half; reduce: the root reduces the whole;
 *    - all-gather, broadcast, gather, scatter, all-to-all: copies of the
 *      blocks of the peers' (the root's) input that this rank receives;
 *      an in-place all-to-all first copies its input aside, since peers
 *      read blocks of it that this rank overwrites.
 *    Every rank computes each block once and the others copy it, so all
 *    ranks end with the same bits.
 *
 * The cache of peers' allocations: an entry is (peer, base and size in the
 * peer's address space, handle). A handle that differs for an overlapping
 * range of the same peer means the peer freed that memory and allocated
 * again: the old entry is retired then, and closed with the communicator.
 * A peer in this very process (ranks as threads) is read at its own
 * addresses. */
#include "dev_priv.h"

#include "base/config.h"
#include "base/log.h"
#include "coll.h"
#include "comm.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a rank tells the others of one buffer. */
typedef struct {
    uint64_t base, size, offset; /* its allocation, in its own address space */
    shoal_dev_ipc_t handle;
} direct_buf_t;

typedef struct {
    int32_t ok;      /* both buffers it uses are device memory, exported */
    int32_t pid;
    direct_buf_t send, recv;
} direct_rec_t;

int shoal_dev_direct_takes(const struct shoal_comm *comm, const shoal_call_t *call)
{
    const char *path = shoal_config_get()->cuda.path;
    if (!strcmp(path, "staged") || comm->team.nhosts != 1 || comm->team.nranks < 2)
        return 0;
    const shoal_coll_args_t *a = &call->args;
    /* A call with a run of its own (one-sided) is no schedule to run. */
    if (call->premul || a->codec || call->comp || call->run ||
        (unsigned)a->op >= SHOAL_OP_COUNT)
        return 0;
    return shoal_dev_direct_takes_kind(a->kind);
}

int shoal_dev_direct_takes_kind(shoal_coll_kind_t kind)
{
    switch (kind) {
    case SHOAL_COLL_ALLREDUCE:
    case SHOAL_COLL_REDUCE_SCATTER:
    case SHOAL_COLL_ALLGATHER:
    case SHOAL_COLL_BROADCAST:
    case SHOAL_COLL_REDUCE:
    case SHOAL_COLL_ALLTOALL:
    case SHOAL_COLL_GATHER:
    case SHOAL_COLL_SCATTER: return 1;
    default: return 0;
    }
}

static shoal_status_t inner(struct shoal_comm *comm, const shoal_call_t *outer,
                            shoal_coll_kind_t kind, const void *s, void *r, size_t count,
                            shoal_dtype_t dt, shoal_op_t op)
{
    shoal_call_t c = {.what = outer->what,
                      .args = {.kind = kind, .sendbuf = s, .recvbuf = r, .count = count,
                               .dtype = dt, .op = op}};
    return shoal_call_run(comm, &c);
}

static shoal_status_t barrier(struct shoal_comm *comm, const shoal_call_t *outer)
{
    shoal_call_t c = {.what = outer->what, .barrier = 1};
    return shoal_call_run(comm, &c);
}

/* Export the allocation holding p (bytes > 0), for the peers. */
static int export_buf(const shoal_dev_ops_t *ops, const void *p, size_t bytes, int *dev_p,
                      direct_buf_t *out)
{
    shoal_dev_mem_t kind;
    size_t ext;
    memset(out, 0, sizeof(*out));
    if (!bytes)
        return 1;
    if (ops->classify(p, &kind, dev_p) != SHOAL_OK || kind != SHOAL_DEV_MEM_DEVICE ||
        ops->extent(p, &ext) != SHOAL_OK || ext < bytes || ops->ipc_get(p, &out->handle) != SHOAL_OK)
        return 0;
    /* The handle carries the offset of p in its allocation (dev_ops.h). */
    uint64_t off, size;
    memcpy(&off, out->handle.bytes + 64, sizeof(off));
    memcpy(&size, out->handle.bytes + 72, sizeof(size));
    out->offset = off;
    out->size = size;
    out->base = (uint64_t)(uintptr_t)p - off;
    return 1;
}

/* Release what this rank's exports hold (once: the sizes are cleared). */
static void put_exports(const shoal_dev_ops_t *ops, direct_rec_t *me)
{
    direct_buf_t *bufs[2] = {&me->send, &me->recv};
    for (int i = 0; i < 2; i++) {
        if (bufs[i]->size)
            ops->ipc_put(&bufs[i]->handle);
        bufs[i]->size = 0;
    }
}

/* A peer's buffer here: its allocation opened (cached), plus its offset;
 * NULL when it cannot be opened. */
static char *peer_ptr(struct shoal_dev_comm *d, struct shoal_comm *comm, int peer,
                      int32_t pid, const direct_buf_t *b)
{
    if (b->size == 0)
        return NULL;
    if (pid == (int32_t)getpid())
        return (char *)(uintptr_t)(b->base + b->offset);
    for (shoal_dev_peer_mem_t **pp = &d->peer_mems; *pp;) {
        shoal_dev_peer_mem_t *m = *pp;
        if (m->peer == peer && m->base == b->base && m->size == b->size &&
            !memcmp(m->handle.bytes, b->handle.bytes, 64))
            return (char *)m->mapped + b->offset;
        if (m->peer == peer && m->base < b->base + b->size && b->base < m->base + m->size) {
            /* The peer freed that memory since: the entry is never used
             * again. It is closed with the communicator, when no stream
             * waits on it: closing may wait for the device's streams,
             * and the caller's stream waits for this call. */
            *pp = m->next;
            m->next = d->peer_stale;
            d->peer_stale = m;
            continue;
        }
        pp = &m->next;
    }
    shoal_dev_peer_mem_t *m = calloc(1, sizeof(*m));
    if (!m || d->ops->ipc_open(&b->handle, &m->mapped) != SHOAL_OK) {
        shoal_debug(CUDA, "rank %d: cannot open rank %d's device memory: %s", comm->team.rank,
                    peer, d->ops->why());
        free(m);
        return NULL;
    }
    m->peer = peer;
    m->base = b->base;
    m->size = b->size;
    m->handle = b->handle;
    m->next = d->peer_mems;
    d->peer_mems = m;
    return (char *)m->mapped + b->offset;
}

/* Scratch of at least bytes, kept for the communicator's life (grown,
 * never shrunk): device memory on dev for an in-place all-to-all's input,
 * or pinned host memory (dev -1) for staging a call. Nothing is freed
 * while the caller's stream waits for this call, since freeing may wait
 * for the device's streams: what a larger one replaces is retired like a
 * peer's stale allocation and freed with the communicator. NULL when
 * there is none. */
static void *direct_scratch(struct shoal_dev_comm *d, int dev, size_t bytes)
{
    int host = dev < 0;
    void **p = host ? &d->host_scratch : &d->scratch;
    size_t *have = host ? &d->host_scratch_bytes : &d->scratch_bytes;
    if (*p && ((!host && d->scratch_dev != dev) || *have < bytes)) {
        shoal_dev_peer_mem_t *m = calloc(1, sizeof(*m));
        if (!m)
            return NULL;
        m->peer = host ? -2 : -1;
        m->mapped = *p;
        m->size = *have;
        m->next = d->peer_stale;
        d->peer_stale = m;
        *p = NULL;
    }
    if (!*p) {
        shoal_status_t s = host ? d->ops->host_alloc(bytes, p) : d->ops->mem_alloc(dev, bytes, p);
        if (s != SHOAL_OK)
            return *p = NULL;
        if (!host)
            d->scratch_dev = dev;
        *have = bytes;
    }
    return *p;
}

/* The cost model's choice (SHOAL_CUDA_PATH=auto), from the estimates
 * algorithm selection uses and the link classes' figures, which every
 * rank holds alike: so every rank chooses the same.
 * - direct: four small host collectives (the handles' all-gather, the
 *   agreement, two barriers), and the device reads about (n-1)/n of the
 *   call's input and output from its peers' devices in about n
 *   operations (a reduction, then a copy from each peer), over NVLink
 *   where every two GPUs of the host have it, else over PCIe;
 * - staged: the call itself on the host, and the input's copy to pinned
 *   memory and the result's back, over PCIe.
 * Small calls stage; large ones, whose host collective and copies cost
 * more than four small collectives and the peer reads, go direct. */
int shoal_dev_direct_pays(const struct shoal_comm *comm, const shoal_call_t *call)
{
    if (strcmp(shoal_config_get()->cuda.path, "auto"))
        return 1;
    uint8_t rec[sizeof(direct_rec_t)];
    int32_t ok = 0;
    shoal_call_t ag = {.args = {.kind = SHOAL_COLL_ALLGATHER, .sendbuf = rec, .recvbuf = rec,
                                .count = sizeof(rec), .dtype = SHOAL_UINT8, .op = SHOAL_SUM}};
    shoal_call_t agree = {.args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = &ok, .recvbuf = &ok,
                                   .count = 1, .dtype = SHOAL_INT32, .op = SHOAL_MIN}};
    shoal_call_t bar = {.barrier = 1};
    const shoal_team_t *t = &comm->team;
    const shoal_links_t *links = &t->cost.links;
    const shoal_link_cost_t *pcie = &links->cls[SHOAL_LINK_GPU_PCIE];
    const shoal_link_cost_t *peer =
        shoal_place_gpus_nvlinked(&t->cluster, t->cluster.host_of[t->rank])
            ? &links->cls[SHOAL_LINK_GPU_NVLINK]
            : pcie;
    double bytes = (double)call->in_bytes + (double)call->out_bytes;
    double direct = shoal_call_estimate(comm, &ag) + shoal_call_estimate(comm, &agree) +
                    2 * shoal_call_estimate(comm, &bar) + t->nranks * peer->lat_s +
                    bytes * (t->nranks - 1) / t->nranks / peer->bw_Bps;
    shoal_call_t host = *call;
    host.run = NULL;
    double staged = shoal_call_estimate(comm, &host) + 2 * pcie->lat_s + bytes / pcie->bw_Bps;
    return staged > direct;
}

/* Elements of block r of count cut into n. */
static void block_of(size_t count, int n, int r, size_t *off_p, size_t *len_p)
{
    size_t lo = count * (size_t)r / (size_t)n, hi = count * (size_t)(r + 1) / (size_t)n;
    *off_p = lo;
    *len_p = hi - lo;
}

/* The host staging of a call the direct path cannot take on some rank:
 * device buffers copied through pinned memory on this rank's stream,
 * around the host collective. */
static shoal_status_t run_staged(struct shoal_dev_comm *d, struct shoal_comm *comm,
                                 const shoal_call_t *call, void *stream)
{
    const shoal_dev_ops_t *ops = d->ops;
    shoal_call_t c = *call;
    c.run = NULL;
    const char *sp = call->args.sendbuf;
    char *rp = call->args.recvbuf;
    size_t in = call->in_bytes, out = call->out_bytes;
    shoal_dev_layout_t l;
    shoal_dev_stage_layout(call, &l);
    void *host = NULL;
    shoal_status_t s = SHOAL_OK;
    if (l.need && !(host = direct_scratch(d, -1, l.need)))
        return shoal_coll_failed(comm, SHOAL_ERR_NO_MEMORY, "%s: no pinned memory for %zu "
                                 "bytes: %s", call->what, l.need, ops->why());
    char *h_in = (char *)host + l.in_off, *h_out = (char *)host + l.out_off;
    if (l.dev_in) {
        s = ops->copy(h_in, sp, in, stream);
        if (s == SHOAL_OK)
            s = ops->stream_sync(stream);
    }
    if (l.dev_in || l.together)
        c.args.sendbuf = h_in;
    if (l.dev_out || l.together)
        c.args.recvbuf = h_out;
    if (s == SHOAL_OK)
        s = shoal_call_run(comm, &c);
    else
        s = shoal_coll_failed(comm, s, "%s: cannot stage: %s", call->what, ops->why());
    if (s == SHOAL_OK && l.dev_out) {
        s = ops->copy(rp, h_out, out, stream);
        if (s == SHOAL_OK)
            s = ops->stream_sync(stream);
        if (s != SHOAL_OK)
            s = shoal_coll_failed(comm, s, "%s: cannot copy the result back: %s", call->what,
                                  ops->why());
    }
    return s;
}

/* The schedules, on this rank's stream; p[i] are rank i's buffers here. */
static shoal_status_t run_direct(struct shoal_dev_comm *d, struct shoal_comm *comm,
                                 const shoal_call_t *call, char **ps, char **pr, void *stream)
{
    const shoal_dev_ops_t *ops = d->ops;
    const shoal_coll_args_t *a = &call->args;
    int n = comm->team.nranks, r = comm->team.rank;
    size_t es = shoal_dtype_bytes(a->dtype);
    shoal_status_t s = SHOAL_OK;
    size_t blk = a->count * es;
    switch (a->kind) {
    case SHOAL_COLL_ALLREDUCE:
    case SHOAL_COLL_REDUCE_SCATTER:
    case SHOAL_COLL_REDUCE: {
        size_t off, len;
        char *dst;
        if (a->kind == SHOAL_COLL_ALLREDUCE) {
            block_of(a->count, n, r, &off, &len);
            dst = pr[r] + off * es;
        } else if (a->kind == SHOAL_COLL_REDUCE_SCATTER) {
            off = (size_t)r * a->count;
            len = a->count;
            dst = pr[r];
        } else {
            /* Only the root reduces; the others wait at the barrier. */
            off = 0;
            len = r == a->root ? a->count : 0;
            dst = pr[r];
        }
        /* From this rank's own input on: the first step may write it in
         * place, and no later step reads it. */
        for (int k = 1; k < n && s == SHOAL_OK && len; k++) {
            const char *acc = k == 1 ? ps[r] + off * es : dst;
            s = ops->reduce(dst, acc, ps[(r + k) % n] + off * es, len, a->dtype, a->op, stream);
        }
        if (s == SHOAL_OK && a->op == SHOAL_AVG && len)
            s = ops->avg(dst, dst, len, a->dtype, n, stream);
        if (s == SHOAL_OK)
            s = ops->stream_sync(stream);
        if (s != SHOAL_OK || a->kind != SHOAL_COLL_ALLREDUCE)
            break;
        /* Every block reduced before any is copied. */
        s = barrier(comm, call);
        if (s != SHOAL_OK)
            return s;
        for (int k = 1; k < n && s == SHOAL_OK; k++) {
            int q = (r + k) % n;
            block_of(a->count, n, q, &off, &len);
            s = ops->copy(pr[r] + off * es, pr[q] + off * es, len * es, stream);
        }
        if (s == SHOAL_OK)
            s = ops->stream_sync(stream);
        break;
    }
    case SHOAL_COLL_ALLGATHER: {
        for (int k = 0; k < n && s == SHOAL_OK; k++) {
            int q = (r + k) % n;
            if (pr[r] + (size_t)q * blk != ps[q] || q != r)
                s = ops->copy(pr[r] + (size_t)q * blk, ps[q], blk, stream);
        }
        if (s == SHOAL_OK)
            s = ops->stream_sync(stream);
        break;
    }
    case SHOAL_COLL_BROADCAST:
        if (pr[r] != ps[a->root])
            s = ops->copy(pr[r], ps[a->root], blk, stream);
        if (s == SHOAL_OK)
            s = ops->stream_sync(stream);
        break;
    case SHOAL_COLL_ALLTOALL:
        /* Block r of every rank's input (an in-place input was copied
         * aside first: shoal_dev_direct_run). */
        for (int k = 0; k < n && s == SHOAL_OK; k++) {
            int q = (r + k) % n;
            s = ops->copy(pr[r] + (size_t)q * blk, ps[q] + (size_t)r * blk, blk, stream);
        }
        if (s == SHOAL_OK)
            s = ops->stream_sync(stream);
        break;
    case SHOAL_COLL_GATHER:
        for (int q = 0; q < n && s == SHOAL_OK && r == a->root; q++) {
            if (pr[r] + (size_t)q * blk != ps[q])
                s = ops->copy(pr[r] + (size_t)q * blk, ps[q], blk, stream);
        }
        if (s == SHOAL_OK)
            s = ops->stream_sync(stream);
        break;
    case SHOAL_COLL_SCATTER:
        if (pr[r] != ps[a->root] + (size_t)r * blk)
            s = ops->copy(pr[r], ps[a->root] + (size_t)r * blk, blk, stream);
        if (s == SHOAL_OK)
            s = ops->stream_sync(stream);
        break;
    default: return SHOAL_ERR_INTERNAL;
    }
    if (s != SHOAL_OK)
        return shoal_coll_failed(comm, s, "%s: device work failed: %s", call->what, ops->why());
    /* No rank's stream may go on to touch its buffers while others read. */
    return barrier(comm, call);
}

shoal_status_t shoal_dev_direct_stream(struct shoal_comm *comm, const shoal_call_t *call, int dev,
                                       void **stream_p)
{
    struct shoal_dev_comm *d = comm->dev;
    if (!d->stream || d->stream_dev != dev) {
        if (d->stream)
            d->ops->stream_destroy(d->stream);
        d->stream = NULL;
        if (d->ops->stream_create(dev, &d->stream) != SHOAL_OK)
            return shoal_coll_failed(comm, SHOAL_ERR_UNSUPPORTED, "%s: cannot create a stream "
                                     "on device %d: %s", call->what, dev, d->ops->why());
        d->stream_dev = dev;
    }
    *stream_p = d->stream;
    return SHOAL_OK;
}

shoal_status_t shoal_dev_direct_share(struct shoal_comm *comm, const shoal_call_t *call, int can,
                                      const void *send, size_t sbytes, void *recv,
                                      size_t rbytes, char **ps, char **pr, int *all_ok_p)
{
    struct shoal_dev_comm *d = comm->dev;
    const shoal_dev_ops_t *ops = d->ops;
    int n = comm->team.nranks, r = comm->team.rank, dev = -1;
    direct_rec_t me = {.pid = (int32_t)getpid()};
    me.ok = can && export_buf(ops, send, sbytes, &dev, &me.send) &&
            export_buf(ops, recv, rbytes, &dev, &me.recv);
    direct_rec_t *all = calloc((size_t)n, sizeof(*all));
    shoal_status_t s = SHOAL_OK;
    *all_ok_p = 0;
    if (!all) {
        s = shoal_coll_failed(comm, SHOAL_ERR_NO_MEMORY, "%s: no memory", call->what);
        goto out;
    }
    s = inner(comm, call, SHOAL_COLL_ALLGATHER, &me, all, sizeof(me), SHOAL_UINT8, SHOAL_SUM);
    if (s != SHOAL_OK)
        goto out;
    int32_t ok = 1, all_ok = 0;
    for (int q = 0; q < n && ok; q++) {
        ok = all[q].ok;
        if (ok && q != r) {
            ps[q] = peer_ptr(d, comm, q, all[q].pid, &all[q].send);
            if (pr)
                pr[q] = peer_ptr(d, comm, q, all[q].pid, &all[q].recv);
            ok = (!all[q].send.size || ps[q]) && (!all[q].recv.size || !pr || pr[q]);
        }
    }
    ps[r] = (char *)(uintptr_t)send;
    if (pr)
        pr[r] = recv;
    s = inner(comm, call, SHOAL_COLL_ALLREDUCE, &ok, &all_ok, 1, SHOAL_INT32, SHOAL_MIN);
    if (s == SHOAL_OK && !all_ok && !d->fallback_logged) {
        d->fallback_logged = 1;
        shoal_info(CUDA, "rank %d: %s: a rank's buffers are not device memory its peers "
                   "can open (or it cannot open theirs): staging through host memory "
                   "instead", r, call->what);
    }
    *all_ok_p = s == SHOAL_OK && all_ok;
out:
    /* Every peer has opened this rank's exports or given up. */
    put_exports(ops, &me);
    free(all);
    return s;
}

shoal_status_t shoal_dev_direct_barrier(struct shoal_comm *comm, const shoal_call_t *call)
{
    return barrier(comm, call);
}

shoal_status_t shoal_dev_direct_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_dev_comm *d = comm->dev;
    const shoal_dev_ops_t *ops = d->ops;
    const shoal_coll_args_t *a = &call->args;
    int n = comm->team.nranks;
    const void *send = a->sendbuf;
    void *scratch = NULL, *stream;
    shoal_dev_mem_t kind;
    int dev = -1;
    /* This rank's stream, on the device of its buffers. */
    if ((!call->in_bytes || ops->classify(a->sendbuf, &kind, &dev) != SHOAL_OK) &&
        (!call->out_bytes || ops->classify(a->recvbuf, &kind, &dev) != SHOAL_OK))
        dev = -1;
    if (dev < 0 && ops->device_of(NULL, &dev) != SHOAL_OK)
        dev = 0;
    shoal_status_t s = shoal_dev_direct_stream(comm, call, dev, &stream);
    if (s != SHOAL_OK)
        return s;
    if (!shoal_dev_direct_pays(comm, call)) {
        d->staged_by_cost++;
        return run_staged(d, comm, call, stream);
    }
    /* An in-place all-to-all would overwrite blocks its peers still read:
     * its input is read from a copy. */
    if (a->kind == SHOAL_COLL_ALLTOALL && a->sendbuf == a->recvbuf && call->in_bytes &&
        shoal_dev_kind(a->sendbuf) == SHOAL_DEV_MEM_DEVICE &&
        (scratch = direct_scratch(d, dev, call->in_bytes)) &&
        ops->copy(scratch, a->sendbuf, call->in_bytes, stream) == SHOAL_OK &&
        ops->stream_sync(stream) == SHOAL_OK)
        send = scratch;
    else
        scratch = NULL;
    int can = a->kind != SHOAL_COLL_ALLTOALL || a->sendbuf != a->recvbuf || scratch;
    char **ps = calloc((size_t)n, sizeof(*ps)), **pr = calloc((size_t)n, sizeof(*pr));
    int all_ok = 0;
    if (!ps || !pr)
        s = shoal_coll_failed(comm, SHOAL_ERR_NO_MEMORY, "%s: no memory", call->what);
    else
        s = shoal_dev_direct_share(comm, call, can, send, call->in_bytes, a->recvbuf,
                                   call->out_bytes, ps, pr, &all_ok);
    if (s == SHOAL_OK && all_ok) {
        s = run_direct(d, comm, call, ps, pr, stream);
        if (s == SHOAL_OK)
            d->direct_runs++;
    } else if (s == SHOAL_OK) {
        s = run_staged(d, comm, call, stream);
    }
    free(ps);
    free(pr);
    return s;
}

void shoal_dev_direct_release(struct shoal_dev_comm *d)
{
    shoal_dev_peer_mem_t *lists[2] = {d->peer_mems, d->peer_stale};
    for (int i = 0; i < 2; i++) {
        while (lists[i]) {
            shoal_dev_peer_mem_t *m = lists[i];
            lists[i] = m->next;
            /* peer -1, -2: this rank's own retired device, host scratch. */
            if (m->peer == -1)
                d->ops->mem_free(m->mapped);
            else if (m->peer == -2)
                d->ops->host_free(m->mapped);
            else
                d->ops->ipc_close(m->mapped);
            free(m);
        }
    }
    d->peer_mems = d->peer_stale = NULL;
    if (d->scratch)
        d->ops->mem_free(d->scratch);
    if (d->host_scratch)
        d->ops->host_free(d->host_scratch);
    d->scratch = d->host_scratch = NULL;
    if (d->stream)
        d->ops->stream_destroy(d->stream);
    d->stream = NULL;
}
