/* Every collective of the vendor header, on one rank of a forked job: each
 * dtype x op (pre-multiply-sum included) x in/out of place x sizes 0, 1,
 * 1031 and a few of at least 1 MiB, every root for the rooted ones, and
 * send/recv patterns in groups. Reductions are checked against the scalar
 * reference, copies byte for byte; bytes after every receive region and
 * the send buffers of out-of-place calls must come back untouched. */
#include "vendor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ODD_COUNT 1031
/* The first multi-chunk size: 1 MiB of data in the larger of a call's buffers. */
#define BIG_BYTES ((size_t)1 << 20)

typedef struct {
    ncclComm_t comm;
    int rank, n;
    uint32_t salt; /* advanced by every call, in the same order on every rank */
    ncclRedOp_t premul;
    bool premul_ok;
} ctx_t;

static ncclRedOp_t nccl_op(const ctx_t *c, int op)
{
    return op == VT_OP_PREMUL ? c->premul : (ncclRedOp_t)op;
}

static bool op_usable(const ctx_t *c, int op)
{
    return op != VT_OP_PREMUL || c->premul_ok;
}

static const char *place(bool inplace)
{
    return inplace ? "in place" : "out of place";
}

/* buf still holds rank's reduction input (an out-of-place send buffer). */
static void check_input_intact(const char *what, const void *buf, ncclDataType_t dt, int op,
                               const ctx_t *c, size_t count, uint32_t salt)
{
    size_t es = vt_size(dt);
    unsigned char *want = vt_alloc(count * es);
    vt_fill_input(want, dt, op, c->rank, c->n, 0, count, salt);
    for (size_t k = 0; k < count * es; k++) {
        if (((const unsigned char *)buf)[k] != want[k]) {
            vt_fail("%s: send buffer changed at element %zu", what, k / es);
            break;
        }
    }
    free(want);
}

/* ---- reductions ----------------------------------------------------------- */

static void allreduce(ctx_t *c, ncclDataType_t dt, int op, size_t count, bool inplace)
{
    if (!op_usable(c, op))
        return;
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt);
    char what[128];
    snprintf(what, sizeof(what), "ncclAllReduce %s %s count %zu %s", vt_dtype_name(dt),
             vt_op_name(op), count, place(inplace));
    void *send = vt_alloc(len);
    vt_fill_input(send, dt, op, c->rank, c->n, 0, count, salt);
    void *recv = inplace ? send : vt_alloc(len);
    if (vt_rc(what, ncclAllReduce(send, recv, count, dt, nccl_op(c, op), c->comm, VT_STREAM),
              ncclSuccess)) {
        vt_check_reduced(what, recv, dt, op, c->n, 0, count, salt);
        vt_check_sentinel(what, recv, len, len + VT_GUARD);
        if (!inplace)
            check_input_intact(what, send, dt, op, c, count, salt);
    }
    if (!inplace)
        free(recv);
    free(send);
}

/* In place: recvbuff == sendbuff + rank * recvcount. */
static void reduce_scatter(ctx_t *c, ncclDataType_t dt, int op, size_t count, bool inplace)
{
    if (!op_usable(c, op))
        return;
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt), total = len * (size_t)c->n;
    char what[128];
    snprintf(what, sizeof(what), "ncclReduceScatter %s %s recvcount %zu %s", vt_dtype_name(dt),
             vt_op_name(op), count, place(inplace));
    char *send = vt_alloc(total);
    vt_fill_input(send, dt, op, c->rank, c->n, 0, count * (size_t)c->n, salt);
    char *recv = inplace ? send + (size_t)c->rank * len : vt_alloc(len);
    if (vt_rc(what, ncclReduceScatter(send, recv, count, dt, nccl_op(c, op), c->comm, VT_STREAM),
              ncclSuccess)) {
        vt_check_reduced(what, recv, dt, op, c->n, (size_t)c->rank * count, count, salt);
        if (inplace) {
            vt_check_sentinel(what, send, total, total + VT_GUARD);
        } else {
            vt_check_sentinel(what, recv, len, len + VT_GUARD);
            check_input_intact(what, send, dt, op, c, count * (size_t)c->n, salt);
        }
    }
    if (!inplace)
        free(recv);
    free(send);
}

/* recvbuff is only the root's; the others pass NULL (documented as allowed)
 * or a buffer that must stay untouched. */
static void reduce(ctx_t *c, ncclDataType_t dt, int op, size_t count, int root, bool inplace,
                   bool null_recv)
{
    if (!op_usable(c, op))
        return;
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt);
    bool am_root = c->rank == root;
    char what[128];
    snprintf(what, sizeof(what), "ncclReduce %s %s count %zu root %d %s%s", vt_dtype_name(dt),
             vt_op_name(op), count, root, place(inplace),
             !am_root && !inplace && null_recv ? " (recvbuff NULL)" : "");
    void *send = vt_alloc(len);
    vt_fill_input(send, dt, op, c->rank, c->n, 0, count, salt);
    void *recv = inplace ? send : (!am_root && null_recv) ? NULL : vt_alloc(len);
    if (vt_rc(what,
              ncclReduce(send, recv, count, dt, nccl_op(c, op), root, c->comm, VT_STREAM),
              ncclSuccess)) {
        if (am_root) {
            vt_check_reduced(what, recv, dt, op, c->n, 0, count, salt);
            vt_check_sentinel(what, recv, len, len + VT_GUARD);
            if (!inplace)
                check_input_intact(what, send, dt, op, c, count, salt);
        } else {
            check_input_intact(what, send, dt, op, c, count, salt);
            if (recv && !inplace)
                vt_check_sentinel(what, recv, 0, len + VT_GUARD);
        }
    }
    if (recv && !inplace)
        free(recv);
    free(send);
}

/* ---- copies ---------------------------------------------------------------- */

/* In place: sendbuff == recvbuff + rank * sendcount. */
static void allgather(ctx_t *c, ncclDataType_t dt, size_t count, bool inplace)
{
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt), total = len * (size_t)c->n;
    char what[128];
    snprintf(what, sizeof(what), "ncclAllGather %s sendcount %zu %s", vt_dtype_name(dt), count,
             place(inplace));
    char *recv = vt_alloc(total);
    char *send = inplace ? recv + (size_t)c->rank * len : vt_alloc(len);
    vt_fill_bytes(send, 0, len, c->rank, salt);
    if (vt_rc(what, ncclAllGather(send, recv, count, dt, c->comm, VT_STREAM), ncclSuccess)) {
        for (int j = 0; j < c->n; j++) {
            char seg[160];
            snprintf(seg, sizeof(seg), "%s: block of rank %d", what, j);
            vt_check_bytes(seg, recv + (size_t)j * len, dt, 0, len, j, salt);
        }
        vt_check_sentinel(what, recv, total, total + VT_GUARD);
        if (!inplace)
            vt_check_bytes(what, send, dt, 0, len, c->rank, salt);
    }
    if (!inplace)
        free(send);
    free(recv);
}

/* sendbuff is only the root's: the others pass NULL or a buffer that must
 * stay untouched (the header says it is not used there). */
static void broadcast(ctx_t *c, ncclDataType_t dt, size_t count, int root, bool inplace,
                      bool null_send)
{
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt);
    bool am_root = c->rank == root;
    char what[128];
    snprintf(what, sizeof(what), "ncclBroadcast %s count %zu root %d %s%s", vt_dtype_name(dt),
             count, root, place(inplace),
             !am_root && !inplace && null_send ? " (sendbuff NULL)" : "");
    char *recv = vt_alloc(len);
    char *send = inplace ? recv : (!am_root && null_send) ? NULL : vt_alloc(len);
    if (am_root)
        vt_fill_bytes(send, 0, len, root, salt);
    if (vt_rc(what, ncclBroadcast(send, recv, count, dt, root, c->comm, VT_STREAM), ncclSuccess)) {
        vt_check_bytes(what, recv, dt, 0, len, root, salt);
        vt_check_sentinel(what, recv, len, len + VT_GUARD);
        if (send && !inplace) {
            if (am_root)
                vt_check_bytes(what, send, dt, 0, len, root, salt);
            else
                vt_check_sentinel(what, send, 0, len + VT_GUARD);
        }
    }
    if (send && !inplace)
        free(send);
    free(recv);
}

static void bcast(ctx_t *c, ncclDataType_t dt, size_t count, int root)
{
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt);
    char what[128];
    snprintf(what, sizeof(what), "ncclBcast %s count %zu root %d", vt_dtype_name(dt), count, root);
    char *buf = vt_alloc(len);
    if (c->rank == root)
        vt_fill_bytes(buf, 0, len, root, salt);
    if (vt_rc(what, ncclBcast(buf, count, dt, root, c->comm, VT_STREAM), ncclSuccess)) {
        vt_check_bytes(what, buf, dt, 0, len, root, salt);
        vt_check_sentinel(what, buf, len, len + VT_GUARD);
    }
    free(buf);
}

/* In place at the root: sendbuff == recvbuff + root * count. */
static void gather(ctx_t *c, ncclDataType_t dt, size_t count, int root, bool inplace,
                   bool null_recv)
{
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt), total = len * (size_t)c->n;
    bool am_root = c->rank == root;
    char what[128];
    snprintf(what, sizeof(what), "ncclGather %s count %zu root %d %s%s", vt_dtype_name(dt), count,
             root, place(inplace), !am_root && null_recv ? " (recvbuff NULL)" : "");
    char *recv = am_root || !null_recv ? vt_alloc(total) : NULL;
    char *send = am_root && inplace ? recv + (size_t)root * len : vt_alloc(len);
    vt_fill_bytes(send, 0, len, c->rank, salt);
    if (vt_rc(what, ncclGather(send, recv, count, dt, root, c->comm, VT_STREAM), ncclSuccess)) {
        if (am_root) {
            for (int j = 0; j < c->n; j++) {
                char seg[160];
                snprintf(seg, sizeof(seg), "%s: block of rank %d", what, j);
                vt_check_bytes(seg, recv + (size_t)j * len, dt, 0, len, j, salt);
            }
            vt_check_sentinel(what, recv, total, total + VT_GUARD);
        } else if (recv) {
            vt_check_sentinel(what, recv, 0, total + VT_GUARD);
        }
        if (!(am_root && inplace))
            vt_check_bytes(what, send, dt, 0, len, c->rank, salt);
    }
    if (!(am_root && inplace))
        free(send);
    free(recv);
}

/* In place at the root: recvbuff == sendbuff + root * count. */
static void scatter(ctx_t *c, ncclDataType_t dt, size_t count, int root, bool inplace,
                    bool null_send)
{
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt), total = len * (size_t)c->n;
    bool am_root = c->rank == root;
    char what[128];
    snprintf(what, sizeof(what), "ncclScatter %s count %zu root %d %s%s", vt_dtype_name(dt), count,
             root, place(inplace), !am_root && null_send ? " (sendbuff NULL)" : "");
    char *send = am_root || !null_send ? vt_alloc(total) : NULL;
    if (am_root)
        vt_fill_bytes(send, 0, total, root, salt);
    char *recv = am_root && inplace ? send + (size_t)root * len : vt_alloc(len);
    if (vt_rc(what, ncclScatter(send, recv, count, dt, root, c->comm, VT_STREAM), ncclSuccess)) {
        vt_check_bytes(what, recv, dt, (size_t)c->rank * len, len, root, salt);
        if (am_root) {
            vt_check_bytes(what, send, dt, 0, total, root, salt);
            vt_check_sentinel(what, send, total, total + VT_GUARD);
        } else if (send) {
            vt_check_sentinel(what, send, 0, total + VT_GUARD);
        }
        if (!(am_root && inplace))
            vt_check_sentinel(what, recv, len, len + VT_GUARD);
    }
    if (!(am_root && inplace))
        free(recv);
    free(send);
}

/* Block j of rank r's send buffer goes to rank j: bytes (r, j * len). */
static void alltoall(ctx_t *c, ncclDataType_t dt, size_t count)
{
    uint32_t salt = ++c->salt;
    size_t len = count * vt_size(dt), total = len * (size_t)c->n;
    char what[128];
    snprintf(what, sizeof(what), "ncclAlltoAll %s count %zu", vt_dtype_name(dt), count);
    char *send = vt_alloc(total), *recv = vt_alloc(total);
    vt_fill_bytes(send, 0, total, c->rank, salt);
    if (vt_rc(what, ncclAlltoAll(send, recv, count, dt, c->comm, VT_STREAM), ncclSuccess)) {
        for (int i = 0; i < c->n; i++) {
            char seg[160];
            snprintf(seg, sizeof(seg), "%s: block from rank %d", what, i);
            vt_check_bytes(seg, recv + (size_t)i * len, dt, (size_t)c->rank * len, len, i, salt);
        }
        vt_check_sentinel(what, recv, total, total + VT_GUARD);
        vt_check_bytes(what, send, dt, 0, total, c->rank, salt);
    }
    free(send);
    free(recv);
}

/* ---- send / recv -------------------------------------------------------------- */

typedef enum { P2P_RING, P2P_SELF, P2P_ALLTOALL } p2p_pattern_t;

/* Rank r sends block j (bytes (r, j * len)) to every peer j of the pattern
 * and receives block r of each sender, all in one group. recv_first posts
 * the receives before the sends, which a group must not care about. */
static void sendrecv(ctx_t *c, ncclDataType_t dt, size_t count, p2p_pattern_t pattern,
                     bool recv_first)
{
    static const char *const names[] = {"ring", "self", "all-to-all"};
    uint32_t salt = ++c->salt;
    int n = c->n, r = c->rank;
    size_t len = count * vt_size(dt), total = len * (size_t)n;
    char what[128];
    snprintf(what, sizeof(what), "ncclSend/ncclRecv %s %s count %zu%s", names[pattern],
             vt_dtype_name(dt), count, recv_first ? " (receives first)" : "");
    char *send = vt_alloc(total), *recv = vt_alloc(total);
    vt_fill_bytes(send, 0, total, r, salt);
    int to[8], from[8], np = 0;
    if (pattern == P2P_RING) {
        to[0] = (r + 1) % n, from[0] = (r + n - 1) % n, np = 1;
    } else if (pattern == P2P_SELF) {
        to[0] = from[0] = r, np = 1;
    } else {
        for (int j = 0; j < n; j++)
            to[j] = from[j] = j;
        np = n;
    }
    bool ok = vt_rc(what, ncclGroupStart(), ncclSuccess);
    for (int pass = 0; pass < 2; pass++) {
        bool do_recv = (pass == 0) == recv_first;
        for (int k = 0; k < np; k++) {
            if (do_recv)
                ok &= vt_rc(what, ncclRecv(recv + (size_t)from[k] * len, count, dt, from[k],
                                           c->comm, VT_STREAM),
                            ncclSuccess);
            else
                ok &= vt_rc(what, ncclSend(send + (size_t)to[k] * len, count, dt, to[k], c->comm,
                                           VT_STREAM),
                            ncclSuccess);
        }
    }
    ok &= vt_rc(what, ncclGroupEnd(), ncclSuccess);
    if (ok) {
        for (int k = 0; k < np; k++) {
            char seg[160];
            snprintf(seg, sizeof(seg), "%s: block from rank %d", what, from[k]);
            vt_check_bytes(seg, recv + (size_t)from[k] * len, dt, (size_t)r * len, len, from[k],
                           salt);
        }
        vt_check_bytes(what, send, dt, 0, total, r, salt);
        vt_check_sentinel(what, recv, total, total + VT_GUARD);
    }
    free(send);
    free(recv);
}

/* ---- the matrix ------------------------------------------------------------------ */

static void reductions_of(ctx_t *c, ncclDataType_t dt)
{
    int n = c->n, k = 0;
    for (int op = 0; op < VT_NOPS; op++) {
        for (int inplace = 0; inplace < 2; inplace++, k++) {
            allreduce(c, dt, op, ODD_COUNT, inplace);
            reduce_scatter(c, dt, op, ODD_COUNT, inplace);
            reduce(c, dt, op, ODD_COUNT, (int)(dt + k) % n, inplace, k % 4 == 0);
        }
        allreduce(c, dt, op, 1, op % 2);
        reduce_scatter(c, dt, op, 1, op % 2 == 0);
        reduce(c, dt, op, 1, (int)(dt + op) % n, op % 2, false);
    }
    allreduce(c, dt, ncclSum, 0, false);
    reduce_scatter(c, dt, ncclSum, 0, false);
    reduce(c, dt, ncclSum, 0, n - 1, false, false);
}

static void copies_of(ctx_t *c, ncclDataType_t dt)
{
    int n = c->n, d = (int)dt;
    for (int inplace = 0; inplace < 2; inplace++) {
        allgather(c, dt, ODD_COUNT, inplace);
        broadcast(c, dt, ODD_COUNT, (d + inplace) % n, inplace, d % 2 == 0);
        gather(c, dt, ODD_COUNT, (d + 2 * inplace) % n, inplace, d % 2 == 1);
        scatter(c, dt, ODD_COUNT, (d + 3 * inplace) % n, inplace, d % 2 == 0);
    }
    bcast(c, dt, ODD_COUNT, d % n);
    alltoall(c, dt, ODD_COUNT);
    sendrecv(c, dt, ODD_COUNT, P2P_RING, d % 2);
    sendrecv(c, dt, ODD_COUNT, P2P_SELF, d % 2 == 0);
    sendrecv(c, dt, ODD_COUNT, P2P_ALLTOALL, d % 3 == 0);
    for (size_t count = 0; count <= 1; count++) {
        allgather(c, dt, count, count);
        broadcast(c, dt, count, (d + 1) % n, count, false);
        bcast(c, dt, count, n - 1);
        gather(c, dt, count, d % n, count, false);
        scatter(c, dt, count, (d + 1) % n, !count, false);
        alltoall(c, dt, count);
        sendrecv(c, dt, count, P2P_RING, count);
    }
}

/* Every root of every rooted collective, in- and out-of-place by turns. */
static void every_root(ctx_t *c)
{
    static const ncclDataType_t dts[] = {ncclInt32, ncclFloat16, ncclBfloat16, ncclUint64};
    for (int root = 0; root < c->n; root++) {
        ncclDataType_t dt = dts[root % 4];
        bool inplace = root % 2;
        reduce(c, dt, root % 2 ? ncclSum : ncclMax, ODD_COUNT, root, inplace, false);
        broadcast(c, dt, ODD_COUNT, root, inplace, false);
        bcast(c, dt, 7, root);
        gather(c, dt, ODD_COUNT, root, !inplace, false);
        scatter(c, dt, ODD_COUNT, root, inplace, false);
    }
}

/* Sizes past the transport's pieces: each call moves at least 1 MiB. */
static void big(ctx_t *c)
{
    size_t n = (size_t)c->n;
    int last = c->n - 1;
    allreduce(c, ncclFloat32, ncclSum, BIG_BYTES / 4 + 3, false);
    allreduce(c, ncclFloat32, ncclSum, BIG_BYTES / 4 + 3, true);
    allreduce(c, ncclFloat64, ncclAvg, BIG_BYTES / 8 + 1, true);
    reduce_scatter(c, ncclInt64, ncclMax, BIG_BYTES / 8 / n + 5, false);
    reduce_scatter(c, ncclFloat16, ncclSum, BIG_BYTES / 2 / n + 7, true);
    reduce(c, ncclFloat64, ncclSum, BIG_BYTES / 8 + 9, c->n / 2, false, false);
    allgather(c, ncclUint8, BIG_BYTES / n + 3, true);
    allgather(c, ncclInt32, BIG_BYTES / 4 / n + 1, false);
    broadcast(c, ncclFloat64, BIG_BYTES / 8 + 1, last, false, false);
    bcast(c, ncclUint32, BIG_BYTES / 4 + 1, 0);
    gather(c, ncclFloat8e4m3, BIG_BYTES / n + 1, last, true, false);
    scatter(c, ncclBfloat16, BIG_BYTES / 2 / n + 1, 0, false, false);
    alltoall(c, ncclInt32, BIG_BYTES / 4 / n + 1);
    sendrecv(c, ncclFloat32, BIG_BYTES / 4 + 1, P2P_RING, false);
    sendrecv(c, ncclUint64, BIG_BYTES / 8 / n + 1, P2P_ALLTOALL, true);
}

int vt_coll_rank(int rank, int nranks, const vt_ids_t *ids)
{
    ctx_t c = {.rank = rank, .n = nranks};
    if (!VT_RC(ncclCommInitRank(&c.comm, nranks, ids->id[VT_ID_MAIN], rank), ncclSuccess))
        return 1;
    for (int d = 0; d < ncclNumTypes; d++) {
        ncclDataType_t dt = (ncclDataType_t)d;
        /* Each rank multiplies by its own scalar, read once here. */
        unsigned char scalar[8];
        vt_store(dt, scalar, 0, vt_scalar(dt, rank));
        char what[96];
        snprintf(what, sizeof(what), "ncclRedOpCreatePreMulSum(%s, ncclScalarHostImmediate)",
                 vt_dtype_name(dt));
        c.premul_ok = vt_rc(what, ncclRedOpCreatePreMulSum(&c.premul, scalar, dt,
                                                           ncclScalarHostImmediate, c.comm),
                            ncclSuccess);
        /* Overwritten after creation: the operator must not see this. */
        memset(scalar, 0x55, sizeof(scalar));
        reductions_of(&c, dt);
        if (c.premul_ok) {
            snprintf(what, sizeof(what), "ncclRedOpDestroy(premulsum %s)", vt_dtype_name(dt));
            vt_rc(what, ncclRedOpDestroy(c.premul, c.comm), ncclSuccess);
        }
        copies_of(&c, dt);
    }
    every_root(&c);
    big(&c);
    VT_RC(ncclCommDestroy(c.comm), ncclSuccess);
    return 0;
}
