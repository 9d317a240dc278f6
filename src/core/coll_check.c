/* Argument checks of every call, before anything is queued: a bad call
 * gets SHOAL_ERR_INVALID_ARG with its reason, touches no buffer and leaves
 * the communicator usable. */
#include "exec.h"
#include "rma.h"
#include "base/dev.h"

#include "base/dtype.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A byte range a call reads or writes on this rank; len 0 when unused. */
typedef struct {
    const char *p;
    size_t len;
} span_t;

static int spans_overlap(span_t a, span_t b)
{
    return a.len && b.len && a.p < b.p + b.len && b.p < a.p + a.len;
}

static int reduces(shoal_coll_kind_t k)
{
    return k == SHOAL_COLL_ALLREDUCE || k == SHOAL_COLL_REDUCE_SCATTER || k == SHOAL_COLL_REDUCE;
}

static int rooted(shoal_coll_kind_t k)
{
    return k == SHOAL_COLL_BROADCAST || k == SHOAL_COLL_REDUCE || k == SHOAL_COLL_GATHER ||
           k == SHOAL_COLL_SCATTER;
}

static shoal_status_t check_op(struct shoal_comm *comm, shoal_call_t *call)
{
    shoal_coll_args_t *a = &call->args;
    if ((unsigned)a->op < SHOAL_OP_COUNT)
        return SHOAL_OK;
    if (shoal_op_is_bitop(a->op)) {
        if (shoal_dtype_is_int(a->dtype))
            return SHOAL_OK;
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: op %s is for integer types, not %s", call->what,
                               shoal_op_name(a->op), shoal_dtype_name(a->dtype));
    }
    int i = (int)a->op - SHOAL_OP_COUNT;
    if ((int)a->op < 0 || i >= comm->npremul || !comm->premul[i].used)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: unknown op %d", call->what,
                               (int)a->op);
    if (comm->premul[i].dtype != a->dtype)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: pre-multiplied sum %d was made for %s, not %s", call->what,
                               (int)a->op, shoal_dtype_name(comm->premul[i].dtype),
                               shoal_dtype_name(a->dtype));
    call->premul = 1;
    call->premul_dtype = a->dtype;
    memcpy(call->scalar, comm->premul[i].scalar, sizeof(call->scalar));
    call->scalar_ref = comm->premul[i].ref;
    a->op = SHOAL_SUM;
    return SHOAL_OK;
}

/* A compressed all-reduce, reduce-scatter or all-gather: fp32 SUM or AVG
 * (before check_op turns a pre-multiplied sum into SUM), a valid codec, a slot that holds at least
 * one codec block, a known schedule that exists for the codec. */
static shoal_status_t check_codec(struct shoal_comm *comm, const shoal_call_t *call)
{
    const shoal_coll_args_t *a = &call->args;
    const shoal_codec_t *c = a->codec;
    if (a->kind != SHOAL_COLL_ALLREDUCE && a->kind != SHOAL_COLL_REDUCE_SCATTER &&
        a->kind != SHOAL_COLL_ALLGATHER)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: only all-reduce, reduce-scatter and all-gather run a codec",
                               call->what);
    if (a->dtype != SHOAL_FLOAT32)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: compression takes float32 only, not %s", call->what,
                               shoal_dtype_name(a->dtype));
    if (a->op != SHOAL_SUM && a->op != SHOAL_AVG)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: compression takes sum and avg only, not op %d", call->what,
                               (int)a->op);
    if (!c->ops || c->ops->size != sizeof(shoal_codec_ops_t) ||
        c->ops->wire_bytes(c, c->block) == 0)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: invalid codec (block %zu, rounding %d; blocks of 32, 64 "
                               "or 128 values)", call->what, c->block, (int)c->round);
    if (shoal_ring_codec_piece(c, comm->team.chunk_size) == 0)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: one %s block of %zu values (%zu B) exceeds the %zu B "
                               "pipeline piece (SHOAL_CHUNK_SIZE)", call->what, c->ops->name,
                               c->block, c->ops->wire_bytes(c, c->block), comm->team.chunk_size);
    if (a->codec_algo != SHOAL_COMPRESS_ALGO_AUTO && a->codec_algo != SHOAL_COMPRESS_ALGO_RING &&
        a->codec_algo != SHOAL_COMPRESS_ALGO_TWO_SHOT && a->codec_algo != SHOAL_COMPRESS_ALGO_TREE)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: unknown compression algo %d (auto, ring, two-shot or tree)",
                               call->what, a->codec_algo);
    /* Shared scales make the ring's sums exact: quantising each
     * contribution on its own gains nothing. */
    if (a->codec_algo == SHOAL_COMPRESS_ALGO_TWO_SHOT && c->ops == &shoal_codec_ternary)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: the ternary codec has no two-shot schedule (its ring sums "
                               "are exact); use the ring or auto", call->what);
    if (a->codec_algo == SHOAL_COMPRESS_ALGO_TREE && c->ops != &shoal_codec_int8)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: the %s codec has no tree schedule (int8 alone has "
                               "one); use the ring, two-shot or auto", call->what,
                               c->ops->name);
    /* A ring would requantise partial sums to signs at every hop. */
    if (a->codec_algo == SHOAL_COMPRESS_ALGO_RING && c->ops == &shoal_codec_sign)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: the sign codec has only the two-shot schedule (auto)",
                               call->what);
    /* The all-gather's ring forwards each shard's wire unchanged. */
    if (a->kind == SHOAL_COLL_ALLGATHER &&
        ((c->ops != &shoal_codec_int8 && c->ops != &shoal_codec_int4) ||
         (a->codec_algo != SHOAL_COMPRESS_ALGO_AUTO && a->codec_algo != SHOAL_COMPRESS_ALGO_RING)))
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: the compressed all-gather takes int8 or int4 on its ring "
                               "(auto)", call->what);
    if (a->kind == SHOAL_COLL_REDUCE_SCATTER && c->ops == &shoal_codec_ternary)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: the ternary codec's shared scales serve the all-reduce "
                               "only", call->what);
    return SHOAL_OK;
}

typedef struct {
    size_t idx, off, len;
} vblock_t;

static int vblock_cmp(const void *x, const void *y)
{
    const vblock_t *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

/* All-to-all-v: counts and displacements that fit in memory, receive blocks
 * that do not overlap; the extents of both buffers in elements. */
static shoal_status_t check_alltoallv(struct shoal_comm *comm, const shoal_call_t *call,
                                      size_t es, size_t *sext_p, size_t *rext_p)
{
    const shoal_coll_args_t *a = &call->args;
    int n = comm->team.nranks;
    if (!a->sendcounts || !a->sdispls || !a->recvcounts || !a->rdispls)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: a count or displacement array is NULL", call->what);
    size_t sext = 0, rext = 0, limit = SIZE_MAX / es;
    for (int j = 0; j < n; j++) {
        if (a->sdispls[j] > limit || a->sendcounts[j] > limit - a->sdispls[j] ||
            a->rdispls[j] > limit || a->recvcounts[j] > limit - a->rdispls[j])
            return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                                   "%s: block of rank %d overflows the address space "
                                   "(displacement + count in bytes)", call->what, j);
        if (j == comm->team.rank && a->sendcounts[j] != a->recvcounts[j])
            return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                                   "%s: this rank sends itself %zu elements but expects %zu",
                                   call->what, a->sendcounts[j], a->recvcounts[j]);
        if (a->sendcounts[j] && a->sdispls[j] + a->sendcounts[j] > sext)
            sext = a->sdispls[j] + a->sendcounts[j];
        if (a->recvcounts[j] && a->rdispls[j] + a->recvcounts[j] > rext)
            rext = a->rdispls[j] + a->recvcounts[j];
    }
    vblock_t *v = malloc((size_t)n * sizeof(*v));
    if (!v)
        return shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: no memory", call->what);
    size_t nv = 0;
    for (int j = 0; j < n; j++) {
        if (a->recvcounts[j])
            v[nv++] = (vblock_t){(size_t)j, a->rdispls[j], a->recvcounts[j]};
    }
    qsort(v, nv, sizeof(*v), vblock_cmp);
    shoal_status_t s = SHOAL_OK;
    for (size_t i = 1; i < nv && s == SHOAL_OK; i++) {
        if (v[i - 1].off + v[i - 1].len > v[i].off)
            s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                                "%s: receive blocks of ranks %zu and %zu overlap", call->what,
                                v[i - 1].idx, v[i].idx);
    }
    free(v);
    *sext_p = sext;
    *rext_p = rext;
    return s;
}

shoal_status_t shoal_call_check(struct shoal_comm *comm, shoal_call_t *call, int in_group)
{
    shoal_coll_args_t *a = &call->args;
    const char *what = call->what;
    int n = comm->team.nranks, r = comm->team.rank;
    if (call->barrier)
        return SHOAL_OK;
    if (call->rma.kind) {
        /* Checked where it was made (rma.c), against the window. */
        call->in_bytes = call->rma.kind == SHOAL_RMA_PUT ? a->count : 0;
        return SHOAL_OK;
    }
    size_t es = shoal_dtype_bytes(a->dtype);
    if (es == 0)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: unknown dtype %d", what,
                               (int)a->dtype);
    if (a->codec) {
        shoal_status_t s = check_codec(comm, call);
        if (s != SHOAL_OK)
            return s;
    }
    if (reduces(a->kind)) {
        shoal_status_t s = check_op(comm, call);
        if (s != SHOAL_OK)
            return s;
    }
    if (rooted(a->kind) && (a->root < 0 || a->root >= n))
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: root %d is outside 0..%d",
                               what, a->root, n - 1);
    if (shoal_call_is_p2p(call)) {
        if (a->root < 0 || a->root >= n)
            return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: peer %d is outside 0..%d",
                                   what, a->root, n - 1);
        if (a->root == r && !in_group)
            return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                                   "%s: a message to or from oneself needs a group "
                                   "(it would wait for itself)", what);
    }
    if (a->count > SIZE_MAX / es / (size_t)n)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: count %zu of %s overflows the address space", what,
                               a->count, shoal_dtype_name(a->dtype));

    /* The ranges this rank reads (in) and writes (out), in elements. */
    size_t c = a->count, nc = c * (size_t)n, in = 0, out = 0;
    int is_root = r == a->root;
    switch (a->kind) {
    case SHOAL_COLL_ALLREDUCE: in = c; out = c; break;
    case SHOAL_COLL_REDUCE_SCATTER: in = nc; out = c; break;
    case SHOAL_COLL_ALLGATHER: in = c; out = nc; break;
    case SHOAL_COLL_BROADCAST: in = is_root ? c : 0; out = c; break;
    case SHOAL_COLL_REDUCE: in = c; out = is_root ? c : 0; break;
    case SHOAL_COLL_ALLTOALL: in = nc; out = nc; break;
    case SHOAL_COLL_GATHER: in = c; out = is_root ? nc : 0; break;
    case SHOAL_COLL_SCATTER: in = is_root ? nc : 0; out = c; break;
    case SHOAL_COLL_SEND: in = c; break;
    case SHOAL_COLL_RECV: out = c; break;
    case SHOAL_COLL_ALLTOALLV: {
        shoal_status_t s = check_alltoallv(comm, call, es, &in, &out);
        if (s != SHOAL_OK)
            return s;
        break;
    }
    default:
        return shoal_comm_fail(comm, SHOAL_ERR_INTERNAL, "%s: unknown call kind %d", what,
                               (int)a->kind);
    }
    call->in_bytes = in * es;
    call->out_bytes = out * es;
    /* The host cannot read device memory: only the stream-ordered forms
     * take it. Asked only where the process already uses CUDA. */
    if (!call->on_stream && shoal_dev_loaded()) {
        const void *dev = in && shoal_dev_kind(a->sendbuf) == SHOAL_DEV_MEM_DEVICE ? a->sendbuf
                          : out && shoal_dev_kind(a->recvbuf) == SHOAL_DEV_MEM_DEVICE
                              ? a->recvbuf
                              : NULL;
        if (dev)
            return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                                   "%s: %s %p is device memory, which only the stream-ordered "
                                   "calls (shoal.h's _stream forms) take", what,
                                   dev == a->sendbuf ? "sendbuf" : "recvbuf", dev);
    }
    if ((in && !a->sendbuf) || (out && !a->recvbuf))
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: %s is NULL with %zu elements",
                               what, in && !a->sendbuf ? "sendbuf" : "recvbuf",
                               in && !a->sendbuf ? in : out);

    /* In place means exactly the layout NCCL defines; any other overlap
     * would read what the call already wrote. */
    span_t sin = {a->sendbuf, in * es}, sout = {a->recvbuf, out * es};
    span_t res = {(const char *)a->residual, a->residual ? a->count * sizeof(float) : 0};
    if (spans_overlap(res, sin) || spans_overlap(res, sout))
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: the residual array overlaps sendbuf or recvbuf", what);
    /* The last residual is read as the new one is written, value by value:
     * it may be the residual array itself, and nothing else it overlaps. */
    span_t rin = {(const char *)a->residual_in, a->residual_in ? a->count * sizeof(float) : 0};
    if (spans_overlap(rin, sin) || spans_overlap(rin, sout) ||
        (spans_overlap(rin, res) && (const void *)a->residual_in != (const void *)a->residual))
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: the last residual overlaps sendbuf, recvbuf or (other than "
                               "exactly) the residual array", what);
    if (!spans_overlap(sin, sout))
        return SHOAL_OK;
    const char *sp = a->sendbuf, *rp = a->recvbuf;
    int ok;
    switch (a->kind) {
    case SHOAL_COLL_REDUCE_SCATTER: ok = rp == sp + (size_t)r * c * es; break;
    case SHOAL_COLL_ALLGATHER: ok = sp == rp + (size_t)r * c * es; break;
    case SHOAL_COLL_GATHER: ok = sp == rp + (size_t)a->root * c * es; break;
    case SHOAL_COLL_SCATTER: ok = rp == sp + (size_t)a->root * c * es; break;
    default: ok = sp == rp; break;
    }
    if (!ok)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: sendbuf %p and recvbuf %p overlap but are not the in-place "
                               "layout (see shoal.h)", what, (const void *)sp, (void *)rp);
    return SHOAL_OK;
}

int shoal_call_is_empty(const struct shoal_comm *comm, const shoal_call_t *call)
{
    const shoal_coll_args_t *a = &call->args;
    if (call->rma.kind)
        return 0; /* even a put of no bytes brings its signal */
    if (call->barrier)
        return comm->team.nranks == 1;
    if (shoal_call_is_p2p(call))
        return 0; /* an empty message still matches one receive */
    /* An all-to-all-v that moves nothing here may move data between others:
     * it still runs, so that every rank numbers its collectives alike
     * (operation signatures, sig.h). A rank alone moves its one block to
     * itself, when it has one. */
    if (a->kind == SHOAL_COLL_ALLTOALLV)
        return comm->team.nranks == 1 && a->sendcounts[0] == 0;
    return a->count == 0;
}
