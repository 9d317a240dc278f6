/* The MPI door's collectives, blocking and non-blocking: each entry point
 * turns its arguments into a door_call_t in shoal's terms, or passes the
 * call to PMPI_* unchanged.
 *
 * What is taken. Reductions: a type and op of mpi_types.c's table (MPI's
 * own rules on which ops suit which types). The calls that only move data:
 * any predefined type without gaps, moved as bytes. Everywhere: an
 * intracommunicator, counts that are not negative, a root in range; the
 * rest (derived types, user-defined ops, MINLOC and MAXLOC pairs,
 * intercommunicators) goes to MPI. The choice depends on the arguments
 * MPI requires every rank to pass alike (count, type, op, root, the
 * communicator), so that ranks never part ways: a program whose ranks
 * describe the same data with a predefined type on some and a derived type
 * on others is the one case where they could, and shoal's deadline then
 * reports it on the ranks that took the call.
 *
 * In place. MPI's MPI_IN_PLACE is translated into shoal's spelling (the
 * send buffer at this rank's block of the receive buffer, and so on);
 * where MPI keeps the result elsewhere than shoal puts it (in-place
 * reduce-scatter), the call moves it there once complete. */
#include "mpi_priv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>


static int root_ok(int root, MPI_Comm c)
{
    return root >= 0 && root < shoal_mpi_comm_size(c);
}

/* A reduction's type and op, as shoal's. A logical op on one process is
 * MPI's: MPI gives the value itself there (no op is applied), where
 * shoal's logical ops give 1 or 0. */
static int reduces(door_call_t *k, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    if (count < 0 || !shoal_mpi_reduction(t, op, &k->dt, &k->op))
        return 0;
    int logical = k->op == SHOAL_LAND || k->op == SHOAL_LOR || k->op == SHOAL_LXOR;
    return !logical || shoal_mpi_comm_size(c) > 1;
}

static int allreduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                     MPI_Request *req);
static int bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm c, MPI_Request *req);
static int allgather(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                     MPI_Datatype rt, MPI_Comm c, MPI_Request *req);
static int reduce_scatter(const void *sb, void *rb, const int *counts, int block,
                          MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request *req);
static int alltoall(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                    MPI_Datatype rt, MPI_Comm c, MPI_Request *req);
static int barrier(MPI_Comm c, MPI_Request *req);

/* Blocking calls again, as the program made them, for SHOAL_MPI_PATH=auto
 * to time (door_call_t's again; set where the call is not in place): on
 * MPI's path straight to PMPI_*, on shoal's through the door's own entry,
 * which rule.c then sends down shoal's path. */
static int again_allreduce(const door_call_t *k, int shoal)
{
    return shoal ? allreduce(k->m.sb, k->m.rb, k->m.rcount, k->m.rt, k->m.op, k->mpi, NULL)
                 : PMPI_Allreduce(k->m.sb, k->m.rb, k->m.rcount, k->m.rt, k->m.op, k->mpi);
}

static int again_bcast(const door_call_t *k, int shoal)
{
    return shoal ? bcast(k->m.rb, k->m.rcount, k->m.rt, k->m.root, k->mpi, NULL)
                 : PMPI_Bcast(k->m.rb, k->m.rcount, k->m.rt, k->m.root, k->mpi);
}

static int again_allgather(const door_call_t *k, int shoal)
{
    return shoal ? allgather(k->m.sb, k->m.scount, k->m.st, k->m.rb, k->m.rcount, k->m.rt,
                             k->mpi, NULL)
                 : PMPI_Allgather(k->m.sb, k->m.scount, k->m.st, k->m.rb, k->m.rcount,
                                  k->m.rt, k->mpi);
}

static int again_reduce_scatter_block(const door_call_t *k, int shoal)
{
    return shoal ? reduce_scatter(k->m.sb, k->m.rb, NULL, k->m.rcount, k->m.rt, k->m.op,
                                  k->mpi, NULL)
                 : PMPI_Reduce_scatter_block(k->m.sb, k->m.rb, k->m.rcount, k->m.rt, k->m.op,
                                             k->mpi);
}

static int again_alltoall(const door_call_t *k, int shoal)
{
    return shoal ? alltoall(k->m.sb, k->m.scount, k->m.st, k->m.rb, k->m.rcount, k->m.rt,
                            k->mpi, NULL)
                 : PMPI_Alltoall(k->m.sb, k->m.scount, k->m.st, k->m.rb, k->m.rcount, k->m.rt,
                                 k->mpi);
}

static int again_barrier(const door_call_t *k, int shoal)
{
    return shoal ? barrier(k->mpi, NULL) : PMPI_Barrier(k->mpi);
}

/* The arguments MPI took: rcount, rt and op are the memo's key (mpi_priv.h).
 * A blocking call out of place can run again, through again (NULL: none). */
static void mpi_args(door_call_t *k, int (*again)(const door_call_t *, int), const void *sb,
                     int scount, MPI_Datatype st, void *rb, int rcount, MPI_Datatype rt,
                     MPI_Op op, int root)
{
    k->keyed = 1;
    if (!k->nb && sb != MPI_IN_PLACE)
        k->again = again;
    k->m.sb = sb;
    k->m.scount = scount;
    k->m.st = st;
    k->m.rb = rb;
    k->m.rcount = rcount;
    k->m.rt = rt;
    k->m.op = op;
    k->m.root = root;
}

/* count elements of t as bytes (dt UINT8): *bytes_p. */
static int moves(door_call_t *k, int count, MPI_Datatype t, size_t *bytes_p)
{
    size_t es;
    if (count < 0 || !shoal_mpi_bytes(t, &es))
        return 0;
    k->dt = SHOAL_UINT8;
    *bytes_p = (size_t)count * es;
    return 1;
}

static int allreduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                     MPI_Request *req)
{
    door_call_t k;
    door_call_begin(&k, DOOR_ALLREDUCE, req);
    k.sendbuf = sb == MPI_IN_PLACE ? rb : sb;
    k.recvbuf = rb;
    k.count = (size_t)count;
    mpi_args(&k, again_allreduce, sb, count, t, rb, count, t, op, 0);
    if (!shoal_mpi_take(&k, c, reduces(&k, count, t, op, c))) {
        int rc = req ? PMPI_Iallreduce(sb, rb, count, t, op, c, req)
                     : PMPI_Allreduce(sb, rb, count, t, op, c);
        return shoal_mpi_passed(&k, rc);
    }
    return shoal_mpi_call_run(&k, req);
}

int MPI_Allreduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    if (shoal_mpi_memo_passes(DOOR_ALLREDUCE, c, count, t, op))
        return PMPI_Allreduce(sb, rb, count, t, op, c);
    return allreduce(sb, rb, count, t, op, c, NULL);
}

int MPI_Iallreduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                   MPI_Request *req)
{
    return allreduce(sb, rb, count, t, op, c, req);
}

/* MPI_IN_PLACE is the root's only; elsewhere recvbuf is not read. */
static int reduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, int root,
                  MPI_Comm c, MPI_Request *req)
{
    door_call_t k;
    door_call_begin(&k, DOOR_REDUCE, req);
    k.sendbuf = sb == MPI_IN_PLACE ? rb : sb;
    k.recvbuf = rb;
    k.count = (size_t)count;
    k.root = root;
    mpi_args(&k, NULL, sb, count, t, rb, count, t, op, root);
    if (!shoal_mpi_take(&k, c, reduces(&k, count, t, op, c) && root_ok(root, c))) {
        int rc = req ? PMPI_Ireduce(sb, rb, count, t, op, root, c, req)
                     : PMPI_Reduce(sb, rb, count, t, op, root, c);
        return shoal_mpi_passed(&k, rc);
    }
    return shoal_mpi_call_run(&k, req);
}

int MPI_Reduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, int root,
               MPI_Comm c)
{
    if (shoal_mpi_memo_passes(DOOR_REDUCE, c, count, t, op))
        return PMPI_Reduce(sb, rb, count, t, op, root, c);
    return reduce(sb, rb, count, t, op, root, c, NULL);
}

int MPI_Ireduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, int root,
                MPI_Comm c, MPI_Request *req)
{
    return reduce(sb, rb, count, t, op, root, c, req);
}

static int bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm c, MPI_Request *req)
{
    door_call_t k;
    door_call_begin(&k, DOOR_BCAST, req);
    k.sendbuf = buf;
    k.recvbuf = buf;
    k.root = root;
    mpi_args(&k, again_bcast, NULL, count, t, buf, count, t, MPI_OP_NULL, root);
    if (!shoal_mpi_take(&k, c, moves(&k, count, t, &k.count) && root_ok(root, c))) {
        int rc = req ? PMPI_Ibcast(buf, count, t, root, c, req)
                     : PMPI_Bcast(buf, count, t, root, c);
        return shoal_mpi_passed(&k, rc);
    }
    return shoal_mpi_call_run(&k, req);
}

int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm c)
{
    if (shoal_mpi_memo_passes(DOOR_BCAST, c, count, t, MPI_OP_NULL))
        return PMPI_Bcast(buf, count, t, root, c);
    return bcast(buf, count, t, root, c, NULL);
}

int MPI_Ibcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm c, MPI_Request *req)
{
    return bcast(buf, count, t, root, c, req);
}

/* The receive side (significant on every rank) sizes the blocks; a send
 * side that is used must describe as many bytes. */
static int allgather(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                     MPI_Datatype rt, MPI_Comm c, MPI_Request *req)
{
    door_call_t k;
    door_call_begin(&k, DOOR_ALLGATHER, req);
    k.sendbuf = sb;
    k.recvbuf = rb;
    mpi_args(&k, again_allgather, sb, scount, st, rb, rcount, rt, MPI_OP_NULL, 0);
    size_t sbytes;
    int ok = moves(&k, rcount, rt, &k.count) &&
             (sb == MPI_IN_PLACE || (moves(&k, scount, st, &sbytes) && sbytes == k.count));
    if (!shoal_mpi_take(&k, c, ok)) {
        int rc = req ? PMPI_Iallgather(sb, scount, st, rb, rcount, rt, c, req)
                     : PMPI_Allgather(sb, scount, st, rb, rcount, rt, c);
        return shoal_mpi_passed(&k, rc);
    }
    if (sb == MPI_IN_PLACE)
        k.sendbuf = (char *)rb + (size_t)shoal_mpi_comm_rank(c) * k.count;
    return shoal_mpi_call_run(&k, req);
}

int MPI_Allgather(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                  MPI_Datatype rt, MPI_Comm c)
{
    if (shoal_mpi_memo_passes(DOOR_ALLGATHER, c, rcount, rt, MPI_OP_NULL))
        return PMPI_Allgather(sb, scount, st, rb, rcount, rt, c);
    return allgather(sb, scount, st, rb, rcount, rt, c, NULL);
}

int MPI_Iallgather(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                   MPI_Datatype rt, MPI_Comm c, MPI_Request *req)
{
    return allgather(sb, scount, st, rb, rcount, rt, c, req);
}

/* Equal blocks go to shoal's reduce-scatter; unequal ones to an
 * all-reduce into scratch, of which this rank keeps its part. In place,
 * MPI reads the input from recvbuf and leaves the result at its start. */
static int reduce_scatter(const void *sb, void *rb, const int *counts, int block,
                          MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request *req)
{
    door_call_t k;
    door_call_begin(&k, counts ? DOOR_REDUCE_SCATTER : DOOR_REDUCE_SCATTER_BLOCK, req);
    k.sendbuf = sb == MPI_IN_PLACE ? rb : sb;
    k.recvbuf = rb;
    int n = shoal_mpi_comm_size(c), rank = shoal_mpi_comm_rank(c);
    size_t total = 0, before = 0;
    int ok = 1, equal = 1;
    for (int i = 0; counts && i < n; i++) {
        ok &= counts[i] >= 0;
        equal &= counts[i] == counts[0];
        total += (size_t)(counts[i] > 0 ? counts[i] : 0);
        before += i < rank ? (size_t)(counts[i] > 0 ? counts[i] : 0) : 0;
    }
    int mine = counts ? counts[rank] : block;
    if (!counts)
        mpi_args(&k, again_reduce_scatter_block, sb, block, t, rb, block, t, op, 0);
    ok = ok && reduces(&k, mine, t, op, c);
    k.count = counts && !equal ? total : (size_t)(mine > 0 ? mine : 0); /* alike on all ranks */
    if (!shoal_mpi_take(&k, c, ok)) {
        int rc;
        if (counts)
            rc = req ? PMPI_Ireduce_scatter(sb, rb, counts, t, op, c, req)
                     : PMPI_Reduce_scatter(sb, rb, counts, t, op, c);
        else
            rc = req ? PMPI_Ireduce_scatter_block(sb, rb, block, t, op, c, req)
                     : PMPI_Reduce_scatter_block(sb, rb, block, t, op, c);
        return shoal_mpi_passed(&k, rc);
    }
    size_t es;
    shoal_dtype_size(k.dt, &es);
    if (!counts || equal) {
        if (sb == MPI_IN_PLACE) {
            k.recvbuf = (char *)rb + (size_t)rank * k.count * es;
            k.move_to = rb;
            k.move_from = k.recvbuf;
            k.move_len = rank ? k.count * es : 0;
        }
        return shoal_mpi_call_run(&k, req);
    }
    k.tmp = malloc(total * es + 1);
    if (!k.tmp) {
        shoal_mpi_rule_done(&k, 1);
        return shoal_mpi_fail(c, k.comm, k.what, SHOAL_ERR_NO_MEMORY);
    }
    k.recvbuf = k.tmp;
    k.move_to = rb;
    k.move_from = (char *)k.tmp + before * es;
    k.move_len = (size_t)mine * es;
    return shoal_mpi_call_run(&k, req);
}

int MPI_Reduce_scatter_block(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op,
                             MPI_Comm c)
{
    if (shoal_mpi_memo_passes(DOOR_REDUCE_SCATTER_BLOCK, c, count, t, op))
        return PMPI_Reduce_scatter_block(sb, rb, count, t, op, c);
    return reduce_scatter(sb, rb, NULL, count, t, op, c, NULL);
}

int MPI_Ireduce_scatter_block(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op,
                              MPI_Comm c, MPI_Request *req)
{
    return reduce_scatter(sb, rb, NULL, count, t, op, c, req);
}

int MPI_Reduce_scatter(const void *sb, void *rb, const int counts[], MPI_Datatype t, MPI_Op op,
                       MPI_Comm c)
{
    return reduce_scatter(sb, rb, counts, 0, t, op, c, NULL);
}

int MPI_Ireduce_scatter(const void *sb, void *rb, const int counts[], MPI_Datatype t,
                        MPI_Op op, MPI_Comm c, MPI_Request *req)
{
    return reduce_scatter(sb, rb, counts, 0, t, op, c, req);
}

static int alltoall(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                    MPI_Datatype rt, MPI_Comm c, MPI_Request *req)
{
    door_call_t k;
    door_call_begin(&k, DOOR_ALLTOALL, req);
    k.sendbuf = sb == MPI_IN_PLACE ? rb : sb;
    k.recvbuf = rb;
    mpi_args(&k, again_alltoall, sb, scount, st, rb, rcount, rt, MPI_OP_NULL, 0);
    size_t sbytes;
    int ok = moves(&k, rcount, rt, &k.count) &&
             (sb == MPI_IN_PLACE || (moves(&k, scount, st, &sbytes) && sbytes == k.count));
    if (!shoal_mpi_take(&k, c, ok)) {
        int rc = req ? PMPI_Ialltoall(sb, scount, st, rb, rcount, rt, c, req)
                     : PMPI_Alltoall(sb, scount, st, rb, rcount, rt, c);
        return shoal_mpi_passed(&k, rc);
    }
    return shoal_mpi_call_run(&k, req);
}

int MPI_Alltoall(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                 MPI_Datatype rt, MPI_Comm c)
{
    if (shoal_mpi_memo_passes(DOOR_ALLTOALL, c, rcount, rt, MPI_OP_NULL))
        return PMPI_Alltoall(sb, scount, st, rb, rcount, rt, c);
    return alltoall(sb, scount, st, rb, rcount, rt, c, NULL);
}

int MPI_Ialltoall(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                  MPI_Datatype rt, MPI_Comm c, MPI_Request *req)
{
    return alltoall(sb, scount, st, rb, rcount, rt, c, req);
}

/* Counts and displacements (in elements, of a type whose extent is its
 * size) become bytes, in an array the call owns until it completes. */
static int alltoallv(const void *sb, const int *scounts, const int *sdispls, MPI_Datatype st,
                     void *rb, const int *rcounts, const int *rdispls, MPI_Datatype rt,
                     MPI_Comm c, MPI_Request *req)
{
    door_call_t k;
    door_call_begin(&k, DOOR_ALLTOALLV, req);
    k.sendbuf = sb == MPI_IN_PLACE ? rb : sb;
    k.recvbuf = rb;
    int n = shoal_mpi_comm_size(c);
    size_t ses = 0, res = 0;
    int in_place = sb == MPI_IN_PLACE;
    int ok = shoal_mpi_bytes(rt, &res) && (in_place || shoal_mpi_bytes(st, &ses));
    for (int i = 0; ok && i < n; i++)
        ok = rcounts[i] >= 0 && rdispls[i] >= 0 &&
             (in_place || (scounts[i] >= 0 && sdispls[i] >= 0));
    if (in_place) {
        scounts = rcounts;
        sdispls = rdispls;
        ses = res;
    }
    k.v = ok ? malloc(4 * (size_t)n * sizeof(size_t)) : NULL;
    if (!shoal_mpi_take(&k, c, ok && k.v)) {
        free(k.v);
        sb = in_place ? MPI_IN_PLACE : sb;
        int rc = req ? PMPI_Ialltoallv(sb, scounts, sdispls, st, rb, rcounts, rdispls, rt, c,
                                       req)
                     : PMPI_Alltoallv(sb, scounts, sdispls, st, rb, rcounts, rdispls, rt, c);
        return shoal_mpi_passed(&k, rc);
    }
    for (int i = 0; i < n; i++) {
        k.v[i] = (size_t)scounts[i] * ses;
        k.v[n + i] = (size_t)sdispls[i] * ses;
        k.v[2 * n + i] = (size_t)rcounts[i] * res;
        k.v[3 * n + i] = (size_t)rdispls[i] * res;
    }
    k.dt = SHOAL_UINT8;
    return shoal_mpi_call_run(&k, req);
}

int MPI_Alltoallv(const void *sb, const int scounts[], const int sdispls[], MPI_Datatype st,
                  void *rb, const int rcounts[], const int rdispls[], MPI_Datatype rt,
                  MPI_Comm c)
{
    return alltoallv(sb, scounts, sdispls, st, rb, rcounts, rdispls, rt, c, NULL);
}

int MPI_Ialltoallv(const void *sb, const int scounts[], const int sdispls[], MPI_Datatype st,
                   void *rb, const int rcounts[], const int rdispls[], MPI_Datatype rt,
                   MPI_Comm c, MPI_Request *req)
{
    return alltoallv(sb, scounts, sdispls, st, rb, rcounts, rdispls, rt, c, req);
}

/* Gather and scatter: the side of a rank's own block sizes it (the send
 * side of gather, the receive side of scatter, or the root's other side
 * when it is in place); the root's other side must describe as much. */
static int rooted(door_kind_t kind, const MPI_Request *req, const void *sb, int scount,
                  MPI_Datatype st, void *rb, int rcount, MPI_Datatype rt, int root, MPI_Comm c,
                  door_call_t *k)
{
    door_call_begin(k, kind, req);
    k->sendbuf = sb;
    k->recvbuf = rb;
    k->root = root;
    int is_root = root_ok(root, c) && shoal_mpi_comm_rank(c) == root;
    int gather = kind == DOOR_GATHER;
    const void *own_buf = gather ? sb : rb;
    int own_count = gather ? scount : rcount, all_count = gather ? rcount : scount;
    MPI_Datatype own_t = gather ? st : rt, all_t = gather ? rt : st;
    size_t all_bytes;
    int ok = root_ok(root, c);
    if (ok && own_buf == MPI_IN_PLACE)
        ok = is_root && moves(k, all_count, all_t, &k->count);
    else if (ok)
        ok = moves(k, own_count, own_t, &k->count) &&
             (!is_root || (moves(k, all_count, all_t, &all_bytes) && all_bytes == k->count));
    if (!shoal_mpi_take(k, c, ok))
        return 0;
    size_t at = (size_t)root * k->count;
    if (own_buf == MPI_IN_PLACE && gather)
        k->sendbuf = (char *)rb + at;
    else if (own_buf == MPI_IN_PLACE)
        k->recvbuf = (char *)sb + at;
    return 1;
}

static int gather(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                  MPI_Datatype rt, int root, MPI_Comm c, MPI_Request *req)
{
    door_call_t k;
    if (!rooted(DOOR_GATHER, req, sb, scount, st, rb, rcount, rt, root, c, &k)) {
        int rc = req ? PMPI_Igather(sb, scount, st, rb, rcount, rt, root, c, req)
                     : PMPI_Gather(sb, scount, st, rb, rcount, rt, root, c);
        return shoal_mpi_passed(&k, rc);
    }
    return shoal_mpi_call_run(&k, req);
}

int MPI_Gather(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
               MPI_Datatype rt, int root, MPI_Comm c)
{
    return gather(sb, scount, st, rb, rcount, rt, root, c, NULL);
}

int MPI_Igather(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                MPI_Datatype rt, int root, MPI_Comm c, MPI_Request *req)
{
    return gather(sb, scount, st, rb, rcount, rt, root, c, req);
}

static int scatter(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                   MPI_Datatype rt, int root, MPI_Comm c, MPI_Request *req)
{
    door_call_t k;
    if (!rooted(DOOR_SCATTER, req, sb, scount, st, rb, rcount, rt, root, c, &k)) {
        int rc = req ? PMPI_Iscatter(sb, scount, st, rb, rcount, rt, root, c, req)
                     : PMPI_Scatter(sb, scount, st, rb, rcount, rt, root, c);
        return shoal_mpi_passed(&k, rc);
    }
    return shoal_mpi_call_run(&k, req);
}

int MPI_Scatter(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                MPI_Datatype rt, int root, MPI_Comm c)
{
    return scatter(sb, scount, st, rb, rcount, rt, root, c, NULL);
}

int MPI_Iscatter(const void *sb, int scount, MPI_Datatype st, void *rb, int rcount,
                 MPI_Datatype rt, int root, MPI_Comm c, MPI_Request *req)
{
    return scatter(sb, scount, st, rb, rcount, rt, root, c, req);
}

static int barrier(MPI_Comm c, MPI_Request *req)
{
    door_call_t k;
    door_call_begin(&k, DOOR_BARRIER, req);
    mpi_args(&k, again_barrier, NULL, 0, MPI_DATATYPE_NULL, NULL, 0, MPI_DATATYPE_NULL,
               MPI_OP_NULL, 0);
    if (!shoal_mpi_take(&k, c, 1))
        return shoal_mpi_passed(&k, req ? PMPI_Ibarrier(c, req) : PMPI_Barrier(c));
    return shoal_mpi_call_run(&k, req);
}

int MPI_Barrier(MPI_Comm c)
{
    if (shoal_mpi_memo_passes(DOOR_BARRIER, c, 0, MPI_DATATYPE_NULL, MPI_OP_NULL))
        return PMPI_Barrier(c);
    return barrier(c, NULL);
}

int MPI_Ibarrier(MPI_Comm c, MPI_Request *req)
{
    return barrier(c, req);
}
