/* Running calls on the executor's thread: one call through its selected
 * algorithm, and a task's calls with the all-reduces of a group fused and
 * its sends and receives moved together. */
#include "coll.h"
#include "exec.h"

#include "base/clock.h"
#include "base/dtype.h"
#include "fault.h"
#include "flight.h"
#include "rma.h"
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

shoal_status_t shoal_coll_failed(struct shoal_comm *comm, shoal_status_t s, const char *fmt, ...)
{
    /* Once aborted, whatever broke next (a peer seeing us go) is the abort's
     * doing: report that. */
    if (atomic_load_explicit(&comm->team.aborted, memory_order_acquire))
        s = SHOAL_ERR_ABORTED;
    else
        s = shoal_fault_explain(comm, s);
    /* Whatever stopped a run midway left pieces in the FIFOs that the next
     * operation would misread: the communicator is broken for good. */
    int ok = SHOAL_OK;
    atomic_compare_exchange_strong_explicit(&comm->error, &ok, (int)s, memory_order_acq_rel,
                                            memory_order_acquire);
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    /* The others hear of it at once rather than at their deadline. */
    shoal_fault_report(comm, s);
    char cause[SHOAL_ERROR_MAX];
    pthread_mutex_lock(&comm->watch_lock);
    snprintf(cause, sizeof(cause), "%s", comm->cause);
    pthread_mutex_unlock(&comm->watch_lock);
    shoal_comm_fail(comm, s, "%s failed on rank %d%s%s", what, comm->team.rank,
                    cause[0] ? ": " : "", cause);
    /* What this rank was doing, and how far each peer got. */
    shoal_flight_dump(comm->flight, shoal_status_string(s));
    return s;
}

/* On one rank a reduction's result is the input, which every algorithm's
 * one-rank shortcut copies; a logical op still owes 1 or 0 (x || x). out:
 * where the result lies (the staged input when the call has no recvbuf). */
static void one_rank_logical(struct shoal_comm *comm, const shoal_coll_args_t *args, void *out)
{
    int reducing = args->kind == SHOAL_COLL_ALLREDUCE || args->kind == SHOAL_COLL_REDUCE ||
                   args->kind == SHOAL_COLL_REDUCE_SCATTER;
    if (comm->team.nranks != 1 || !reducing || args->count == 0 || !out ||
        args->op < SHOAL_LAND || args->op > SHOAL_LXOR)
        return;
    shoal_combine(&comm->team, shoal_reduce_fn(args->dtype, SHOAL_LOR), out, out, out,
                  args->count, shoal_dtype_bytes(args->dtype));
}

shoal_status_t shoal_coll_run(struct shoal_comm *comm, const shoal_algo_ops_t *algo,
                              const char *what, const shoal_coll_args_t *args,
                              const shoal_coll_staging_t *staging)
{
    shoal_plan_t *plan;
    int cached;
    shoal_status_t s = shoal_plan_get(&comm->team, algo, args, &plan, &cached);
    if (s == SHOAL_OK) {
        if (args->stage_bytes)
            staging->fill(staging, plan->input);
        s = shoal_plan_run(plan, args);
        if (s == SHOAL_OK)
            one_rank_logical(comm, args, args->recvbuf ? args->recvbuf : plan->input);
        if (s == SHOAL_OK && args->stage_bytes && staging->drain)
            staging->drain(staging, plan->input);
        if (!cached)
            shoal_plan_destroy(plan);
    }
    if (s != SHOAL_OK)
        return shoal_coll_failed(comm, s, "%s: %s of %zu x %s", what, algo->name, args->count,
                                 shoal_dtype_name(args->dtype));
    return SHOAL_OK;
}

/* The signature every piece of the next collective carries: the same on
 * every rank when their calls agree. A compressed all-reduce has no root;
 * its place holds the codec's id, so that ranks whose codecs would encode
 * or decode differently (nearest against stochastic, another block) fail
 * with a mismatch instead of mixing their wires. */
static void begin_sig(struct shoal_comm *comm, const shoal_coll_args_t *args, unsigned kind)
{
    int rooted = args->kind == SHOAL_COLL_BROADCAST || args->kind == SHOAL_COLL_REDUCE ||
                 args->kind == SHOAL_COLL_GATHER || args->kind == SHOAL_COLL_SCATTER;
    const shoal_codec_t *c = args->codec;
    int32_t root = rooted ? args->root : -1;
    if (c)
        root = (int32_t)shoal_sig_codec_id(c->ops->name, c->block, (int)c->round,
                                           c->wide ? 16 : c->packed ? 4 : 8, args->codec_algo);
    shoal_comm_set_sig(comm, (shoal_sig_t){
        .seq = comm->nseq++,
        .count = args->kind == SHOAL_COLL_ALLTOALLV ? SHOAL_SIG_COUNT_ANY : args->count,
        .kind = (uint8_t)kind,
        .dtype = (uint8_t)args->dtype,
        .op = shoal_op_sig_code(args->op),
        .root = root,
    });
    shoal_fault_reset(comm);
}

void shoal_coll_begin_p2p(struct shoal_comm *comm)
{
    shoal_comm_set_sig(comm, (shoal_sig_t){.count = SHOAL_SIG_COUNT_ANY, .kind = SHOAL_SIG_P2P,
                                            .root = -1});
    comm->team.stream_out = 0;
    shoal_fault_reset(comm);
}

/* Bytes of output a call writes on this rank (the root's, for rooted ones). */
static size_t output_bytes(const struct shoal_comm *comm, const shoal_coll_args_t *a)
{
    size_t n = a->count;
    if (a->kind == SHOAL_COLL_ALLGATHER || a->kind == SHOAL_COLL_ALLTOALL ||
        a->kind == SHOAL_COLL_GATHER) {
        n *= (size_t)comm->team.nranks;
    } else if (a->kind == SHOAL_COLL_ALLTOALLV) {
        n = 0;
        for (int j = 0; j < comm->team.nranks; j++)
            n += a->recvcounts[j];
    }
    return n * shoal_dtype_bytes(a->dtype);
}

static shoal_status_t run_selected(struct shoal_comm *comm, const char *what,
                                   const shoal_coll_args_t *args, unsigned sig_kind,
                                   const shoal_coll_staging_t *staging)
{
    begin_sig(comm, args, sig_kind);
    comm->team.stream_out = output_bytes(comm, args) >= comm->stream_min;
    /* A compressed all-reduce runs the codec schedule its call asks for. */
    const shoal_algo_ops_t *algo =
        args->codec ? shoal_codec_algo_select(&comm->team, args) : shoal_algo_choose(&comm->team, args);
    shoal_flight_start(comm->flight, comm->flight_cur, algo ? algo->name : "none", &comm->sig);
    if (!algo)
        return shoal_comm_fail(comm, SHOAL_ERR_UNSUPPORTED, "%s: no algorithm can serve it",
                               what);
    return shoal_coll_run(comm, algo, what, args, staging);
}

/* Elements a rank contributes to a reducing call (what a pre-multiplied
 * sum scales). */
static size_t input_elems(const struct shoal_comm *comm, const shoal_coll_args_t *a)
{
    return a->kind == SHOAL_COLL_REDUCE_SCATTER ? a->count * (size_t)comm->team.nranks : a->count;
}

/* Extent in elements of an all-to-all's send buffer. */
static size_t alltoall_extent(const struct shoal_comm *comm, const shoal_coll_args_t *a)
{
    if (a->kind == SHOAL_COLL_ALLTOALL)
        return a->count * (size_t)comm->team.nranks;
    size_t ext = 0;
    for (int j = 0; j < comm->team.nranks; j++) {
        if (a->sendcounts[j] && a->sdispls[j] + a->sendcounts[j] > ext)
            ext = a->sdispls[j] + a->sendcounts[j];
    }
    return ext;
}

double shoal_call_estimate(const struct shoal_comm *comm, const shoal_call_t *call)
{
    if (call->rma.kind) {
        /* A put or a signal as a message to its peer; a wait's time is
         * its peers' puts. */
        if (call->rma.kind == SHOAL_RMA_WAIT)
            return 0;
        return shoal_algo_lat(&comm->team) + (double)call->args.count /
                                                 shoal_algo_bw(&comm->team);
    }
    if (shoal_call_is_empty(comm, call))
        return 0;
    uint8_t byte = 0;
    shoal_coll_args_t barrier = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = &byte,
                                 .recvbuf = &byte, .count = 1, .dtype = SHOAL_UINT8,
                                 .op = SHOAL_MAX};
    const shoal_coll_args_t *args = call->barrier ? &barrier : &call->args;
    const shoal_algo_ops_t *algo = shoal_algo_select(&comm->team, args);
    double t = algo ? algo->cost(&comm->team, args) : 0;
    if (t <= 0 && !call->barrier) {
        /* A single rank only copies: its input at the local bandwidth. */
        t = shoal_algo_bytes(args, args->count) / comm->team.cost.link_bw_Bps;
    }
    return t > 0 ? t : 0;
}

/* A call's input, scaled by its pre-multiplied sum's scalar. */
static void fill_premul(const shoal_coll_staging_t *st, void *input)
{
    const shoal_call_t *call = st->ctx;
    shoal_premul_scale(input, call->args.sendbuf, st->n, call->args.dtype,
                       shoal_call_scalar(call));
}

/* A call's input as it is. */
static void fill_copy(const shoal_coll_staging_t *st, void *input)
{
    const shoal_call_t *call = st->ctx;
    memcpy(input, call->args.sendbuf, st->n * shoal_dtype_bytes(call->args.dtype));
}

shoal_status_t shoal_call_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    if (shoal_call_is_empty(comm, call))
        return SHOAL_OK;
    if (call->run)
        return call->run(comm, call);
    if (call->barrier) {
        /* A one-byte all-reduce through the data path rather than the
         * bootstrap: a dead or stalled peer shows up as in any collective,
         * and no rank leaves before every rank has sent its byte. */
        uint8_t one = 1, all;
        shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = &one, .recvbuf = &all,
                                  .count = 1, .dtype = SHOAL_UINT8, .op = SHOAL_MAX};
        return run_selected(comm, call->what, &args, SHOAL_SIG_BARRIER, NULL);
    }
    shoal_coll_args_t args = call->args;
    size_t es = shoal_dtype_bytes(args.dtype);
    shoal_coll_staging_t st = {.comm = comm, .ctx = call};
    if (call->premul) {
        st.n = input_elems(comm, &args);
        st.fill = fill_premul;
    } else if ((args.kind == SHOAL_COLL_ALLTOALL || args.kind == SHOAL_COLL_ALLTOALLV) &&
               args.sendbuf == args.recvbuf) {
        /* In place: every rank's block is read after others may have
         * landed on it, so the input is kept aside first. */
        st.n = alltoall_extent(comm, &args);
        st.fill = fill_copy;
    } else {
        /* Its own kind: against a plain all-reduce, a mismatch. */
        unsigned kind = call->sig_kind ? call->sig_kind
                        : args.codec   ? (args.kind == SHOAL_COLL_REDUCE_SCATTER
                                              ? SHOAL_SIG_RS_CODEC : SHOAL_SIG_ALLREDUCE_CODEC)
                                       : args.kind;
        return run_selected(comm, call->what, &args, kind, NULL);
    }
    /* The input is staged in the plan's memory (NULL sendbuf). */
    args.sendbuf = NULL;
    args.stage_bytes = st.n * es;
    return run_selected(comm, call->what, &args, args.kind, &st);
}

/* Whether b can join an all-reduce fused with a. */
static int fusable(const shoal_call_t *a, const shoal_call_t *b)
{
    return !b->barrier && b->args.kind == SHOAL_COLL_ALLREDUCE && !b->args.codec && !b->comp &&
           !b->run &&
           b->args.dtype == a->args.dtype && b->args.op == a->args.op &&
           b->premul == a->premul && b->scalar_ref == a->scalar_ref &&
           !memcmp(b->scalar, a->scalar, sizeof(a->scalar));
}

/* Whether calls[i] belongs to a run of fused all-reduces (sends and
 * receives between them go after the collectives; empty calls do nothing). */
static int in_run(const struct shoal_comm *comm, const shoal_call_t *c)
{
    return !shoal_call_is_p2p(c) && !shoal_call_is_empty(comm, c);
}

/* A fused run's staging: its calls and how many (st->n). */
static void fill_fused(const shoal_coll_staging_t *st, void *input)
{
    const shoal_call_t *calls = st->ctx;
    char *buf = input;
    for (size_t i = 0; i < st->n; i++) {
        const shoal_coll_args_t *a = &calls[i].args;
        size_t bytes = a->count * shoal_dtype_bytes(a->dtype);
        if (!in_run(st->comm, &calls[i]))
            continue;
        if (calls[i].premul)
            shoal_premul_scale(buf, a->sendbuf, a->count, a->dtype, shoal_call_scalar(&calls[i]));
        else
            memcpy(buf, a->sendbuf, bytes);
        buf += bytes;
    }
}

static void drain_fused(const shoal_coll_staging_t *st, const void *input)
{
    const shoal_call_t *calls = st->ctx;
    const char *buf = input;
    for (size_t i = 0; i < st->n; i++) {
        const shoal_coll_args_t *a = &calls[i].args;
        size_t bytes = a->count * shoal_dtype_bytes(a->dtype);
        if (!in_run(st->comm, &calls[i]))
            continue;
        memcpy(a->recvbuf, buf, bytes);
        buf += bytes;
    }
}

/* All-reduces calls[0..n) that in_run selects (all fusable) as one, staged
 * in the plan's memory: the cost of one all-reduce of their total size
 * instead of n latencies. Every rank lays them out alike, so the result is
 * the same as n separate calls with the chosen algorithm. */
static shoal_status_t run_fused(struct shoal_comm *comm, const shoal_call_t *calls, size_t n)
{
    const shoal_call_t *c0 = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (in_run(comm, &calls[i])) {
            c0 = c0 ? c0 : &calls[i];
            total += calls[i].args.count;
        }
    }
    shoal_coll_staging_t st = {.fill = fill_fused, .drain = drain_fused, .comm = comm, .ctx = calls,
                               .n = n};
    /* NULL buffers: the staged input, reduced in place. */
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .count = total,
                              .dtype = c0->args.dtype, .op = c0->args.op,
                              .stage_bytes = total * shoal_dtype_bytes(c0->args.dtype)};
    return run_selected(comm, "group of all-reduces", &args, SHOAL_COLL_ALLREDUCE, &st);
}

void shoal_call_xfer(struct shoal_comm *comm, const shoal_call_t *call, shoal_xfer_t *x)
{
    const shoal_coll_args_t *a = &call->args;
    int send = a->kind == SHOAL_COLL_SEND;
    *x = (shoal_xfer_t){
        .ep = shoal_comm_ep(comm, a->root),
        .buf = send ? (void *)a->sendbuf : a->recvbuf,
        .esize = shoal_dtype_bytes(a->dtype),
    };
    x->bytes = a->count * x->esize;
}

/* Every send and receive of calls[0..n) at once. Messages to and from
 * oneself pair up in order by copying. */
static shoal_status_t run_p2p(struct shoal_comm *comm, const shoal_call_t *calls, size_t n)
{
    shoal_xfer_t *x = calloc(n ? n : 1, sizeof(*x));
    const shoal_call_t **selfs = calloc(n ? n : 1, sizeof(*selfs));
    const shoal_call_t **selfr = calloc(n ? n : 1, sizeof(*selfr));
    if (!x || !selfs || !selfr) {
        free(x);
        free(selfs);
        free(selfr);
        return shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "no memory for %zu sends/receives", n);
    }
    size_t ns = 0, nr = 0, nss = 0, nsr = 0;
    /* Sends fill x from the front, receives from the back. */
    for (size_t i = 0; i < n; i++) {
        const shoal_coll_args_t *a = &calls[i].args;
        if (!shoal_call_is_p2p(&calls[i]))
            continue;
        int send = a->kind == SHOAL_COLL_SEND;
        if (a->root == comm->team.rank) {
            if (send)
                selfs[nss++] = &calls[i];
            else
                selfr[nsr++] = &calls[i];
            continue;
        }
        shoal_call_xfer(comm, &calls[i], send ? &x[ns++] : &x[n - 1 - nr++]);
    }
    shoal_status_t s = SHOAL_OK;
    if (nss != nsr)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                            "group: %zu sends to oneself but %zu receives from oneself", nss, nsr);
    for (size_t i = 0; i < nss && s == SHOAL_OK; i++) {
        const shoal_coll_args_t *sa = &selfs[i]->args, *ra = &selfr[i]->args;
        size_t sb = sa->count * shoal_dtype_bytes(sa->dtype);
        size_t rb = ra->count * shoal_dtype_bytes(ra->dtype);
        if (sb != rb)
            s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                                "group: send to oneself of %zu B meets a receive of %zu B", sb, rb);
        else if (sb && ra->recvbuf != sa->sendbuf)
            memmove(ra->recvbuf, sa->sendbuf, sb);
    }
    /* Receives were stored back to front: put them in issue order. */
    for (size_t i = 0; i < nr / 2; i++) {
        shoal_xfer_t tmp = x[n - 1 - i];
        x[n - 1 - i] = x[n - nr + i];
        x[n - nr + i] = tmp;
    }
    if (s == SHOAL_OK && ns + nr > 0) {
        shoal_coll_begin_p2p(comm);
        shoal_flight_start(comm->flight, comm->flight_cur, "p2p", &comm->sig);
        s = shoal_xfer_run(&comm->team, x, ns, x + n - nr, nr, shoal_deadline_after(comm->team.timeout_ns));
        if (s != SHOAL_OK)
            s = shoal_coll_failed(comm, s, "%zu sends and %zu receives", ns, nr);
    }
    free(x);
    free(selfs);
    free(selfr);
    return s;
}

shoal_status_t shoal_calls_run(struct shoal_comm *comm, const shoal_call_t *calls,
                               size_t ncalls)
{
    shoal_status_t s = SHOAL_OK;
    size_t np2p = 0;
    /* Collectives in order; a run of fusable all-reduces (sends and
     * receives between them do not break it, they go after) as one. */
    size_t i = 0;
    while (i < ncalls && s == SHOAL_OK) {
        const shoal_call_t *c = &calls[i];
        if (shoal_call_is_p2p(c)) {
            np2p++;
            i++;
            continue;
        }
        if (shoal_call_is_empty(comm, c) || c->barrier || c->args.kind != SHOAL_COLL_ALLREDUCE ||
            c->args.codec || c->comp || c->run) {
            s = shoal_call_run(comm, c);
            i++;
            continue;
        }
        size_t nrun = 0, j = i;
        for (; j < ncalls; j++) {
            const shoal_call_t *d = &calls[j];
            if (shoal_call_is_p2p(d) || shoal_call_is_empty(comm, d))
                continue;
            if (!fusable(c, d))
                break;
            nrun++;
        }
        s = nrun == 1 ? shoal_call_run(comm, c) : run_fused(comm, calls + i, j - i);
        /* The p2p calls skipped inside the run are counted when i passes them. */
        for (; i < j; i++)
            np2p += shoal_call_is_p2p(&calls[i]);
    }
    if (s == SHOAL_OK && np2p > 0)
        s = run_p2p(comm, calls, ncalls);
    return s;
}
