/* A call the door takes, from the MPI entry point's arguments (coll.c) to
 * shoal and back: whether to take it, running it blocking or not, and
 * what it owes once complete.
 *
 * With SHOAL_COMPRESS=int8, a blocking MPI_Allreduce of MPI_FLOAT sums of
 * SHOAL_COMPRESS_MIN bytes or more goes through shoal_allreduce_int8, as
 * the NCCL door's host all-reduces do. Every rank reads the same settings
 * and passes the same count, type and op, so all take the same path.
 * MPI_Iallreduce is not compressed: the int8 all-reduce has no
 * non-blocking form. */
#include "mpi_priv.h"

#include "base/config.h"
#include "base/log.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[DOOR_NKINDS][2] = {
    [DOOR_ALLREDUCE] = {"MPI_Allreduce", "MPI_Iallreduce"},
    [DOOR_REDUCE] = {"MPI_Reduce", "MPI_Ireduce"},
    [DOOR_BCAST] = {"MPI_Bcast", "MPI_Ibcast"},
    [DOOR_ALLGATHER] = {"MPI_Allgather", "MPI_Iallgather"},
    [DOOR_REDUCE_SCATTER_BLOCK] = {"MPI_Reduce_scatter_block", "MPI_Ireduce_scatter_block"},
    [DOOR_REDUCE_SCATTER] = {"MPI_Reduce_scatter", "MPI_Ireduce_scatter"},
    [DOOR_ALLTOALL] = {"MPI_Alltoall", "MPI_Ialltoall"},
    [DOOR_ALLTOALLV] = {"MPI_Alltoallv", "MPI_Ialltoallv"},
    [DOOR_GATHER] = {"MPI_Gather", "MPI_Igather"},
    [DOOR_SCATTER] = {"MPI_Scatter", "MPI_Iscatter"},
    [DOOR_BARRIER] = {"MPI_Barrier", "MPI_Ibarrier"},
};

/* Calls of each entry point: [kind][non-blocking][taken], of the ones
 * passed to MPI those SHOAL_MPI_PATH=auto passed, and of those the ones
 * that passed at once, as the last of their kind had (door.c's memo).
 * Kept only where the finalize log that reports them is on
 * (SHOAL_DEBUG=info or more): two atomic additions were a fifth of what a
 * passed-through call cost. */
static atomic_ulong counts[DOOR_NKINDS][2][2];
static atomic_ulong by_rule[DOOR_NKINDS][2];
static atomic_ulong at_once[DOOR_NKINDS];

void shoal_mpi_count_at_once(door_kind_t kind)
{
    atomic_fetch_add_explicit(&counts[kind][0][0], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&by_rule[kind][0], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&at_once[kind], 1, memory_order_relaxed);
}

void shoal_mpi_log_counts(void)
{
    unsigned long all[2] = {0, 0};
    for (int k = 0; k < DOOR_NKINDS; k++)
        for (int nb = 0; nb < 2; nb++)
            for (int t = 0; t < 2; t++)
                all[t] += atomic_load_explicit(&counts[k][nb][t], memory_order_relaxed);
    shoal_info(INIT, "MPI door: %lu calls taken, %lu passed to MPI", all[1], all[0]);
    for (int k = 0; k < DOOR_NKINDS; k++) {
        for (int nb = 0; nb < 2; nb++) {
            unsigned long took = atomic_load_explicit(&counts[k][nb][1], memory_order_relaxed);
            unsigned long gave = atomic_load_explicit(&counts[k][nb][0], memory_order_relaxed);
            unsigned long ruled = atomic_load_explicit(&by_rule[k][nb], memory_order_relaxed);
            unsigned long memo = nb ? 0 : atomic_load_explicit(&at_once[k], memory_order_relaxed);
            if (took || gave)
                shoal_info(INIT, "MPI door: %s: %lu taken, %lu passed to MPI (%lu of them "
                           "by SHOAL_MPI_PATH=auto, %lu at once)", names[k][nb], took, gave,
                           ruled, memo);
        }
    }
}

/* ok: whether the arguments allow shoal (type, op, counts), decided from
 * what every rank passes alike. */
shoal_comm_t shoal_mpi_take(door_call_t *k, MPI_Comm c, int ok)
{
    door_comm_t *dc = shoal_mpi_ready() && ok ? shoal_mpi_comm(c) : NULL;
    k->what = names[k->kind][k->nb != 0];
    k->mpi = c;
    k->dc = dc && dc->comm ? dc : NULL;
    k->comm = k->dc ? dc->comm : NULL;
    k->learn = NULL;
    int slower = k->comm && !shoal_mpi_rule_take(k);
    if (slower) /* k->dc stays: the rule's state */
        k->comm = NULL;
    shoal_mpi_rule_test_lag(k, k->comm != NULL);
    if (shoal_log_level >= SHOAL_LOG_INFO && !shoal_mpi_rule_again()) {
        if (slower)
            atomic_fetch_add_explicit(&by_rule[k->kind][k->nb != 0], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&counts[k->kind][k->nb != 0][k->comm != NULL], 1,
                                  memory_order_relaxed);
    }
    shoal_debug(INIT, "MPI door: %s %s%s", k->what, k->comm ? "taken" : "passed to MPI",
                slower ? " (SHOAL_MPI_PATH=auto)" : "");
    return k->comm;
}

int shoal_mpi_passed(door_call_t *k, int rc)
{
    if (k->learn)
        shoal_mpi_rule_done(k, 0);
    else if (k->dc) /* by the rule's choice (shoal_mpi_take) */
        shoal_mpi_memo_keep(k);
    return rc;
}

static int compressed(const door_call_t *k, int blocking)
{
    const shoal_compress_config_t *cc = &shoal_config_get()->compress;
    size_t es = sizeof(float);
    return blocking && cc->kind == SHOAL_COMPRESS_INT8 && k->kind == DOOR_ALLREDUCE &&
           k->op == SHOAL_SUM && k->dt == SHOAL_FLOAT32 && k->count > 0 &&
           k->count >= cc->min_bytes / es + (cc->min_bytes % es != 0);
}

/* Blocking when req_p is NULL. */
shoal_status_t shoal_mpi_call_issue(door_call_t *k, shoal_request_t *req_p)
{
    shoal_comm_t sc = k->comm;
    const void *sb = k->sendbuf;
    void *rb = k->recvbuf;
    size_t n = k->count;
    shoal_dtype_t dt = k->dt;
    shoal_op_t op = k->op;
    int root = k->root;
    const size_t *v = k->v;
    size_t nr = v ? (size_t)shoal_mpi_comm_size(k->mpi) : 0;
    k->compress = compressed(k, req_p == NULL);
    switch (k->kind) {
    case DOOR_ALLREDUCE:
        if (k->compress)
            return shoal_allreduce_int8(sb, rb, n, dt, op, sc, NULL);
        return req_p ? shoal_iallreduce(sb, rb, n, dt, op, sc, req_p)
                     : shoal_allreduce(sb, rb, n, dt, op, sc);
    case DOOR_REDUCE:
        return req_p ? shoal_ireduce(sb, rb, n, dt, op, root, sc, req_p)
                     : shoal_reduce(sb, rb, n, dt, op, root, sc);
    case DOOR_BCAST:
        return req_p ? shoal_ibroadcast(sb, rb, n, dt, root, sc, req_p)
                     : shoal_broadcast(sb, rb, n, dt, root, sc);
    case DOOR_ALLGATHER:
        return req_p ? shoal_iallgather(sb, rb, n, dt, sc, req_p)
                     : shoal_allgather(sb, rb, n, dt, sc);
    case DOOR_REDUCE_SCATTER_BLOCK:
    case DOOR_REDUCE_SCATTER:
        if (k->tmp)
            return req_p ? shoal_iallreduce(sb, rb, n, dt, op, sc, req_p)
                         : shoal_allreduce(sb, rb, n, dt, op, sc);
        return req_p ? shoal_ireduce_scatter(sb, rb, n, dt, op, sc, req_p)
                     : shoal_reduce_scatter(sb, rb, n, dt, op, sc);
    case DOOR_ALLTOALL:
        return req_p ? shoal_ialltoall(sb, rb, n, dt, sc, req_p)
                     : shoal_alltoall(sb, rb, n, dt, sc);
    case DOOR_ALLTOALLV:
        return req_p ? shoal_ialltoallv(sb, v, v + nr, rb, v + 2 * nr, v + 3 * nr, dt, sc, req_p)
                     : shoal_alltoallv(sb, v, v + nr, rb, v + 2 * nr, v + 3 * nr, dt, sc);
    case DOOR_GATHER:
        return req_p ? shoal_igather(sb, rb, n, dt, root, sc, req_p)
                     : shoal_gather(sb, rb, n, dt, root, sc);
    case DOOR_SCATTER:
        return req_p ? shoal_iscatter(sb, rb, n, dt, root, sc, req_p)
                     : shoal_scatter(sb, rb, n, dt, root, sc);
    case DOOR_BARRIER:
        return req_p ? shoal_ibarrier(sc, req_p) : shoal_barrier(sc);
    case DOOR_NKINDS:
        break;
    }
    return SHOAL_ERR_INTERNAL;
}

void shoal_mpi_call_finish(door_call_t *k, int ok)
{
    if (ok && k->move_len)
        memmove(k->move_to, k->move_from, k->move_len);
    free(k->v);
    free(k->tmp);
    k->v = NULL;
    k->tmp = NULL;
    k->move_len = 0;
}

/* The whole of a taken call: blocking when req is NULL, else started with
 * its MPI request made. A failure goes through the communicator's error
 * handler. */
int shoal_mpi_call_run(door_call_t *k, MPI_Request *req)
{
    shoal_request_t sr = NULL;
    shoal_status_t s = shoal_mpi_call_issue(k, req ? &sr : NULL);
    shoal_mpi_rule_done(k, 1); /* blocking calls only are timed */
    if (s == SHOAL_OK && k->compress)
        shoal_debug(INIT, "MPI door: %s compressed (int8)", k->what);
    if (s != SHOAL_OK || !req) {
        shoal_mpi_call_finish(k, s == SHOAL_OK);
        if (s != SHOAL_OK && shoal_mpi_rule_again())
            return MPI_ERR_OTHER;
        return s == SHOAL_OK ? MPI_SUCCESS : shoal_mpi_fail(k->mpi, k->comm, k->what, s);
    }
    return shoal_mpi_request_start(k, sr, req);
}
