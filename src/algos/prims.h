/* Pipeline primitives: the few moves every algorithm is a schedule of. Each
 * moves one piece of at most comm->chunk_size bytes through the endpoints'
 * slot FIFOs, waiting (while driving transport progress) until a slot is
 * free or a piece has arrived, up to the operation's deadline. */
#ifndef SHOAL_PRIMS_H
#define SHOAL_PRIMS_H

#include "compress/codec.h"
#include "core/comm.h"
#include "base/dtype.h"
#include "reduce.h"

#include <string.h>

/* The schedules' only local data moves: copies of payload, reduction
 * kernel calls and AVG finishes all go through these. On a dry
 * communicator (comm->dry, a simulation) they touch no data and only count
 * the bytes of each pass in comm->dry_bytes, which the simulated transport
 * charges to the rank's clock. */
static inline void shoal_move(struct shoal_comm *comm, void *dst, const void *src, size_t bytes)
{
    if (comm->dry)
        comm->dry_bytes += bytes;
    else if (bytes)
        memcpy(dst, src, bytes);
}

/* memcpy with streaming stores (copy.c), for destinations not read again soon. */
void shoal_copy_stream(void *dst, const void *src, size_t bytes);

/* A copy into the operation's output that nothing reads again before it
 * returns: streamed past the caches when the operation's output is too
 * large for them (comm->stream_out, set per operation), where a plain copy
 * would read every line in first and push the inputs out. */
static inline void shoal_move_out(struct shoal_comm *comm, void *dst, const void *src,
                                  size_t bytes)
{
    if (comm->dry)
        comm->dry_bytes += bytes;
    else if (comm->stream_out)
        shoal_copy_stream(dst, src, bytes);
    else if (bytes)
        memcpy(dst, src, bytes);
}

static inline void shoal_combine(struct shoal_comm *comm, shoal_reduce_fn_t fn, void *dst,
                                 const void *a, const void *b, size_t count, size_t esize)
{
    if (comm->dry)
        comm->dry_bytes += count * esize;
    else
        fn(dst, a, b, count);
}

static inline void shoal_finish_avg(struct shoal_comm *comm, void *dst, size_t count,
                                    shoal_dtype_t dtype, int n)
{
    if (comm->dry)
        comm->dry_bytes += count * shoal_dtype_bytes(dtype);
    else
        shoal_avg_finish(dst, dst, count, dtype, n);
}

typedef struct {
    struct shoal_comm *comm;
    shoal_ep_t *send_ep;      /* next rank, or NULL */
    shoal_ep_t *recv_ep;      /* previous rank, or NULL */
    shoal_reduce_fn_t reduce; /* dst = received op local */
    shoal_dtype_t dtype;
    size_t esize;             /* bytes per element */
    int avg_n;                /* > 0: recv_reduce_copy_send finishes AVG over avg_n ranks */
    uint64_t deadline_ns;
    /* Codec stage (the *_enc/_addenc/_dec primitives): fp32 values travel
     * in codec's wire form, and residual, when not NULL, is the error
     * feedback array of the whole tensor (value i at residual[i]). */
    const shoal_codec_t *codec;
    float *residual;
} shoal_prims_t;

/* One wait's state for shoal_prims_idle; start it zeroed. */
typedef struct {
    unsigned spins;    /* turns since the last yield */
    uint64_t since_ns; /* when the wait first yielded; 0 before */
} shoal_idle_t;

/* One idle turn of a wait: drive transport progress, poll the abort flag,
 * and every few calls check the deadline, then yield the core or, once the
 * wait has gone on long enough for the transport, sleep until a peer
 * rings. SHOAL_OK to go on waiting. */
shoal_status_t shoal_prims_idle(struct shoal_comm *comm, uint64_t deadline_ns, shoal_idle_t *w);

/* Piece out to send_ep. */
shoal_status_t shoal_prim_send(shoal_prims_t *p, const void *src, size_t bytes);
/* Piece in from recv_ep into dst. */
shoal_status_t shoal_prim_recv(shoal_prims_t *p, void *dst, size_t bytes);
/* Received op src, sent on. */
shoal_status_t shoal_prim_recv_reduce_send(shoal_prims_t *p, const void *src, size_t bytes);
/* dst = received op src (AVG finished when avg_n > 0); dst sent on
 * (send_ep may be NULL). */
shoal_status_t shoal_prim_recv_reduce_copy_send(shoal_prims_t *p, const void *src, void *dst,
                                                size_t bytes);
/* dst = received; sent on (send_ep may be NULL). */
shoal_status_t shoal_prim_recv_copy_send(shoal_prims_t *p, void *dst, size_t bytes);

/*
 * The codec stage: the same moves for fp32 values that travel compressed.
 * These take n, a count of values, and first, the index in the whole tensor
 * of the piece's first value (the codec's block boundaries, random stream
 * and residual are indexed by it); a piece is p->codec->ops->wire_bytes(n)
 * bytes on the wire, which must fit a slot, and a received piece of any
 * other length is an error. Each quantisation writes p->residual[first ..
 * first + n) when p->residual is set. On a dry communicator they count one
 * pass over the n values per codec operation and move no data.
 */
/* Encoded src out to send_ep. */
shoal_status_t shoal_prim_send_enc(shoal_prims_t *p, const float *src, size_t first, size_t n);
/* Received (+) src, encoded again, sent on (codec add_encode). */
shoal_status_t shoal_prim_recv_addenc_send(shoal_prims_t *p, const float *src, size_t first,
                                           size_t n);
/* The last hop of a reduction: received (+) src encoded into the send slot,
 * dst = its decoded value (AVG finished when avg_n > 0), and the wire sent
 * on unchanged (send_ep must be set): the same bytes every other rank will
 * decode. */
shoal_status_t shoal_prim_recv_addenc_copy_send(shoal_prims_t *p, const float *src, float *dst,
                                                size_t first, size_t n);
/* dst = decoded received piece (AVG finished when avg_n > 0); the wire
 * forwarded unchanged (send_ep may be NULL). */
shoal_status_t shoal_prim_recv_dec_copy_send(shoal_prims_t *p, float *dst, size_t first,
                                             size_t n);
/* The owner's part of a direct exchange: dst = decode(received) + src in
 * fp32 (p->reduce, the SUM kernel; no AVG), nothing sent on. tmp holds n
 * floats of scratch for the decoded piece; dst may equal src. */
shoal_status_t shoal_prim_recv_dec_reduce(shoal_prims_t *p, const float *src, float *dst,
                                          float *tmp, size_t first, size_t n);
/* src encoded into the send slot (p->residual written), dst = its decoded
 * value (AVG finished when avg_n > 0), the wire sent on: a final value
 * quantised once, the same bytes every other rank will decode. dst may
 * equal src. */
shoal_status_t shoal_prim_enc_copy_send(shoal_prims_t *p, const float *src, float *dst,
                                        size_t first, size_t n);

/* The root's last hop of a tree reduction: received (+) src encoded into
 * wire, codec wire_bytes(n) bytes of the caller's memory (p->residual
 * written), dst = its decoded value (AVG finished when avg_n > 0), nothing
 * sent: the caller sends wire on unchanged later, the same bytes every
 * other rank will decode. dst may equal src. */
shoal_status_t shoal_prim_recv_addenc_keep(shoal_prims_t *p, const float *src, float *dst,
                                           void *wire, size_t first, size_t n);
/* shoal_prim_recv_dec_copy_send that also copies the received wire into
 * wire (wire_bytes(n) bytes of the caller's memory) when wire is not NULL,
 * for a second send of the same bytes. */
shoal_status_t shoal_prim_recv_dec_keep_send(shoal_prims_t *p, float *dst, void *wire,
                                             size_t first, size_t n);

/* Wait until everything posted to send_ep has left this process, so the
 * operation may return without leaving a peer waiting on unpushed bytes. */
shoal_status_t shoal_prim_flush(shoal_prims_t *p);

/*
 * Messages to and from any peers, moved concurrently: the engine of
 * send/recv, groups, all-to-all, gather, scatter and of the exchanges of
 * recursive halving-doubling. A message of `bytes` travels as
 * ceil(bytes / chunk_size) pieces (one empty piece when bytes is 0), so the
 * receiver sees each message's boundaries and a size that differs from the
 * sender's is an error, not a silent mix-up. Messages to one peer leave in
 * array order, and those from one peer are matched in array order.
 */
typedef struct {
    shoal_ep_t *ep;            /* the peer's endpoint */
    void *buf;                 /* send: source (read only); recv: destination */
    size_t bytes;
    /* recv only: NULL copies; else buf = received reduce buf, element-wise,
     * with elements of esize bytes. */
    shoal_reduce_fn_t reduce;
    size_t esize;
    size_t done;               /* bytes moved so far; 0 before the first call */
    int started;               /* internal: a piece has moved */
} shoal_xfer_t;

/* Move every message of sends[] and recvs[] until all are complete and the
 * sends flushed, driving progress, up to deadline_ns. Peers must be real
 * (no self messages). SHOAL_ERR_TIMEOUT (naming the peers still owed),
 * SHOAL_ERR_PEER, SHOAL_ERR_ABORTED or SHOAL_ERR_INTERNAL (a piece of the
 * wrong size) otherwise. */
shoal_status_t shoal_xfer_run(struct shoal_comm *comm, shoal_xfer_t *sends, size_t nsends,
                              shoal_xfer_t *recvs, size_t nrecvs, uint64_t deadline_ns);

/* One pass of shoal_xfer_run that never waits: move every piece that can
 * move now, push what sends have posted, and drive transport progress once.
 * *moved_p: whether any piece moved. A message is complete when done ==
 * bytes and started is set (sends also need their endpoint's flush to say
 * SHOAL_OK before the operation may be called complete). No deadline: the
 * caller owns it. Errors as shoal_xfer_run. */
shoal_status_t shoal_xfer_step(struct shoal_comm *comm, shoal_xfer_t *sends, size_t nsends,
                               shoal_xfer_t *recvs, size_t nrecvs, int *moved_p);

/* Whether x is complete (for sends: handed to the transport). */
static inline int shoal_xfer_complete(const shoal_xfer_t *x)
{
    return x->started && x->done == x->bytes;
}

#endif
