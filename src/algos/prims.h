/* Pipeline primitives: the few moves every algorithm is a schedule of. Each
 * moves one piece of at most team->chunk_size bytes through the endpoints'
 * slot FIFOs, waiting (while driving transport progress) until a slot is
 * free or a piece has arrived, up to the operation's deadline. */
#ifndef SHOAL_PRIMS_H
#define SHOAL_PRIMS_H

#include "base/dtype.h"
#include "compress/codec.h"
#include "team.h"
#include "kernels.h"
#include "reduce.h"

#include <string.h>

/* The schedules' only local data moves: copies of payload, reduction
 * kernel calls and AVG finishes all go through the communicator's kernels
 * (kernels.h), so that the same schedules run over host memory, in the
 * simulator (which touches no data) and, later, on devices. */
static inline void shoal_move(shoal_team_t *team, void *dst, const void *src, size_t bytes)
{
    team->kern->move(team, dst, src, bytes);
}

/* A copy into the operation's output that nothing reads again before it
 * returns: streamed past the caches when the operation's output is too
 * large for them (team->stream_out, set per operation). */
static inline void shoal_move_out(shoal_team_t *team, void *dst, const void *src,
                                  size_t bytes)
{
    team->kern->move_out(team, dst, src, bytes);
}

static inline void shoal_combine(shoal_team_t *team, shoal_reduce_fn_t fn, void *dst,
                                 const void *a, const void *b, size_t count, size_t esize)
{
    team->kern->combine(team, fn, dst, a, b, count, esize);
}

static inline void shoal_finish_avg(shoal_team_t *team, void *dst, size_t count,
                                    shoal_dtype_t dtype, int n)
{
    team->kern->finish_avg(team, dst, count, dtype, n);
}

struct shoal_stage_ops;

typedef struct {
    shoal_team_t *team;
    shoal_ep_t *send_ep;      /* next rank, or NULL */
    shoal_ep_t *recv_ep;      /* previous rank, or NULL */
    shoal_reduce_fn_t reduce; /* dst = received op local */
    shoal_dtype_t dtype;
    size_t esize;             /* bytes per element */
    int avg_n;                /* > 0: recv_reduce_copy_send finishes AVG over avg_n ranks */
    uint64_t deadline_ns;
    /* The stage the schedule's moves go through (stage.h); the codec
     * stage's codec and error-feedback array of the whole tensor (value i
     * at residual[i]; NULL: none), and working memory for its decodes. */
    const struct shoal_stage_ops *st;
    const shoal_codec_t *codec;
    float *residual;
    void *tmp;
    /* Nonzero: a wait that would wait returns SHOAL_INPROGRESS at once,
     * before the move has touched anything, so the move can be tried
     * again later (a pipelined schedule drives several lanes of moves
     * from one thread, hier.c). */
    int poll;
    /* Error feedback's addend: the last call's residual of the whole
     * tensor (value i at addend[i]), which a stage adds to src in every
     * move that reads src (stage.h). The run binds the call's (NULL: none);
     * a schedule clears it around the moves whose src is not this rank's
     * input but a partial sum that already holds it. fp32 only. */
    const float *addend;
} shoal_prims_t;

/* One wait's state for shoal_prims_idle; start it zeroed. */
typedef struct {
    unsigned spins;    /* turns since the last yield */
    uint64_t since_ns; /* when the wait first yielded; 0 before */
} shoal_idle_t;

/* One idle turn of a wait: drive transport progress, poll the abort flag,
 * and every few calls check the deadline, then, once the wait has gone on
 * long enough for the transport, sleep until a peer rings, or else yield
 * the core if the wait has lasted team->yield_after_ns. SHOAL_OK to go on
 * waiting. */
shoal_status_t shoal_prims_idle(shoal_team_t *team, uint64_t deadline_ns, shoal_idle_t *w);

/* team->yield_after_ns for a host whose ranks outnumber its CPUs
 * (crowded) or not: at once where crowded, since the rank waited for may
 * need this CPU; else after a wait of SHOAL_YIELD_SHARE times what a
 * sched_yield() costs here (measured once), so that the yields add at
 * most 1/SHOAL_YIELD_SHARE to a wait and none to a short one. */
#define SHOAL_YIELD_SHARE 64
uint64_t shoal_prims_yield_after(int crowded);

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

/* The waits the primitives and stages are built of. A free slot of at
 * least bytes to send_ep; a piece of exactly bytes from recv_ep, its
 * signature checked before a byte of it is read; a piece in and, when
 * send_ep is set, a slot out (*out_p NULL otherwise). With p->poll they
 * return SHOAL_INPROGRESS instead of waiting, having taken nothing: every
 * move waits for all it needs before it reads, writes or posts. */
shoal_status_t shoal_prims_wait_send(shoal_prims_t *p, size_t bytes, void **buf_p);
shoal_status_t shoal_prims_wait_recv(shoal_prims_t *p, size_t bytes, const void **buf_p);
shoal_status_t shoal_prims_wait_pair(shoal_prims_t *p, size_t bytes, const void **in_p,
                                     void **out_p);
/* A filled slot of bytes goes to send_ep. */
shoal_status_t shoal_prims_post(shoal_prims_t *p, size_t bytes);
/* The piece in is done with; the slot out (if any) goes to send_ep. */
shoal_status_t shoal_prims_pass_on(shoal_prims_t *p, size_t bytes, void *out);
/* The piece in is done with. */
static inline shoal_status_t shoal_prims_release(shoal_prims_t *p)
{
    return p->recv_ep->ops->recv_release(p->recv_ep);
}

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
shoal_status_t shoal_xfer_run(shoal_team_t *team, shoal_xfer_t *sends, size_t nsends,
                              shoal_xfer_t *recvs, size_t nrecvs, uint64_t deadline_ns);

/* One pass of shoal_xfer_run that never waits: move every piece that can
 * move now, push what sends have posted, and drive transport progress once.
 * *moved_p: whether any piece moved. A message is complete when done ==
 * bytes and started is set (sends also need their endpoint's flush to say
 * SHOAL_OK before the operation may be called complete). No deadline: the
 * caller owns it. Errors as shoal_xfer_run. */
shoal_status_t shoal_xfer_step(shoal_team_t *team, shoal_xfer_t *sends, size_t nsends,
                               shoal_xfer_t *recvs, size_t nrecvs, int *moved_p);

/* Whether x is complete (for sends: handed to the transport). */
static inline int shoal_xfer_complete(const shoal_xfer_t *x)
{
    return x->started && x->done == x->bytes;
}

#endif
