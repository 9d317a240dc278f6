/* The single-copy collectives over shared memory ("put"): the core they
 * share (put_core.c) and what each collective's file builds on it
 * (put_allgather.c, put_broadcast.c, put_gather_scatter.c,
 * put_reduce.c).
 *
 * A rank can only write or read a peer's buffer that the peer's transport
 * exposes (over shm: shareable memory from shoal_mem_alloc, which peers
 * map, or private memory, which they reach by cross-memory attach where
 * the ranks found it permitted and faster at the buffer's length), and
 * only while the peer is inside the call: before, the peer may still be
 * using that buffer's previous contents; after, it may reuse it. So every
 * call starts with small control messages that carry remote keys (or "no
 * key"): receiving a peer's key is also the peer's permission to touch
 * that buffer. Who sends keys to whom is the collective's choice, but it
 * is always arranged so that every rank sees the same answers and decides
 * alike: when a key that the schedule needs is missing, every rank runs the
 * slot algorithm the cost model would otherwise have chosen, together.
 *
 * A key that one rank cannot attach (say, /proc is not readable between
 * two processes) costs no agreement: that pair moves its block through
 * slots, announced by a PUT_DATA control message (a writer that cannot
 * write) or asked for by PUT_NOKEY (a reader that cannot read).
 *
 * A reader tells the owner when it is done (PUT_DONE); the owner keeps its
 * buffer, and stays in the call, until every reader has. A writer's signal
 * (put_signal) is its own "done".
 *
 * A call whose ranks did not all offer keys falls back, and the plan then
 * runs the fallback straight away for the next PUT_SKIP_MIN calls of its
 * shape, doubling up to PUT_SKIP_MAX while the buffers stay unshareable:
 * a program that never uses shareable memory pays one control round in
 * hundreds of calls, not one per call. Every rank counts the same calls
 * and saw the same answers, so all skip alike. */
#ifndef SHOAL_ALGO_PUT_H
#define SHOAL_ALGO_PUT_H

#include "algo.h"

/* Below this many bytes of output per rank the control round costs more
 * than the copy it saves; the model then never picks the algorithm, which
 * SHOAL_ALGO can still force. */
#define SHOAL_PUT_MIN_BYTES (256u * 1024)
/* The cost of an algorithm the model must not pick (SHOAL_ALGO may). */
#define SHOAL_PUT_UNPICKED 1e6

enum {
    SHOAL_PUT_KEY = 1, /* a key follows: the buffer is reachable */
    SHOAL_PUT_NOKEY,   /* none; from a reader: "send me my block instead" */
    SHOAL_PUT_FALLBACK,
    SHOAL_PUT_DATA,    /* the block follows through slots */
    SHOAL_PUT_PULL,    /* a broadcast's root: read my input with this key */
    SHOAL_PUT_DONE,    /* a reader has finished with the owner's buffer */
};

/* What a peer's first message may be, besides a signal and PUT_DATA. */
enum {
    SHOAL_PUT_ROLE_WRITER = 0, /* nothing else */
    SHOAL_PUT_ROLE_BCAST_PEER, /* a broadcast's non-root: PUT_FALLBACK, PUT_PULL */
    SHOAL_PUT_ROLE_PULL_ROOT,  /* the owner of pulled data: PUT_DONE, PUT_NOKEY */
    SHOAL_PUT_ROLE_READER,     /* reads and is read (reduce-scatter): PUT_DONE or
                                * PUT_NOKEY, and PUT_DATA when asked for */
};

/* A control message. key: the buffer's key (the output; the one buffer of
 * the collectives that name one); key_in: the input's, for the all-reduce,
 * which offers both. */
typedef struct {
    uint32_t type;
    uint32_t keylen;
    uint32_t keylen_in;
    uint32_t pad;
    unsigned char key[SHOAL_TL_RKEY_MAX];
    unsigned char key_in[SHOAL_TL_RKEY_MAX];
} shoal_put_ctrl_t;

enum { SHOAL_PUT_ST_IDLE = 0, SHOAL_PUT_ST_CTRL, SHOAL_PUT_ST_XFER, SHOAL_PUT_ST_FLUSH,
       SHOAL_PUT_ST_DONE };

/* One peer's part of the call. */
typedef struct {
    int peer;
    shoal_ep_t *ep;
    /* What this rank writes to the peer: bytes from src at off in the
     * peer's buffer (rmem; NULL: through slots). */
    const void *src;
    size_t bytes;
    size_t off;
    const shoal_rmem_t *rmem;
    int role;
    int send_state;
    const shoal_put_ctrl_t *reply; /* what ST_CTRL posts */
    /* What the peer writes to this rank (or this rank reads), at dst;
     * roff: where in the peer's buffer a pull reads. */
    void *dst;
    size_t rbytes;
    size_t roff;
    int recv_state;
    /* A reader's: the peer's PUT_DONE or PUT_NOKEY still due; its block
     * still due through slots (this rank asked with PUT_NOKEY), added into
     * dst with reduce; the peer asked for this rank's (1), which is being
     * sent (2). */
    int need_done, need_data, data_req;
    shoal_reduce_fn_t reduce;
    size_t esize;
    shoal_xfer_t sx, rx; /* slot transfers of the data fallback */
} shoal_put_peer_t;

/* The cost of self, a put algorithm, for args on team: the cheapest slot
 * algorithm's times speedup from SHOAL_PUT_MIN_BYTES of output per rank
 * (count elements), SHOAL_PUT_UNPICKED below; < 0 where it cannot run
 * (one rank, a transport that cannot put, several transports, no
 * fallback). Between hosts (one transport joining every pair: ib, one rank
 * per host) a schedule that reads peers' memory (reads set) is
 * SHOAL_PUT_UNPICKED: its reads wait one by one on the network. */
double shoal_put_cost(const shoal_team_t *team, const shoal_coll_args_t *args,
                      const shoal_algo_ops_t *self, double speedup, int reads);
/* ep's get of len bytes at off of rmem into dst. A read that fails
 * otherwise than unsupported or the peer's error first waits a little for
 * news of a failed rank (a peer that saw one may have freed what it
 * offered) and returns that rank's error when it comes. */
shoal_status_t shoal_put_get(shoal_team_t *team, shoal_ep_t *ep, void *dst,
                             const shoal_rmem_t *rmem, size_t off, size_t len);
/* Key of [buf, buf + len) into key (SHOAL_TL_RKEY_MAX bytes) and its
 * length; 0 when peers cannot reach it (no key). */
uint32_t shoal_put_own_key(shoal_team_t *team, void *buf, size_t len, unsigned char *key);
/* A control message of type alone to ep; SHOAL_INPROGRESS while no slot. */
shoal_status_t shoal_put_post_ctrl(shoal_team_t *team, shoal_ep_t *ep, uint32_t type);
extern const shoal_put_ctrl_t shoal_put_done_msg, shoal_put_nokey_msg;
/* Drive every peer's sides to the end, or to the deadline. A broadcast
 * peer that hears PUT_FALLBACK sets *fallback_p. */
shoal_status_t shoal_put_drive(shoal_team_t *team, shoal_put_peer_t *peers, int np,
                               uint64_t deadline, int *fallback_p);
/* The working memory every put plan reserves (shoal_put_plan_with) and
 * its parts: a peer, a control message and two messages per rank. */
shoal_status_t shoal_put_mem(shoal_plan_t *plan, shoal_put_peer_t **peers_p,
                             shoal_put_ctrl_t **ctrl_p, shoal_xfer_t **x_p);
/* The plan of every put algorithm (reduces: with the op's kernel), with
 * extra bytes of working memory past shoal_put_mem's, which a run takes
 * with shoal_put_extra. */
shoal_status_t shoal_put_plan_with(shoal_team_t *team, const shoal_coll_args_t *args,
                                   int reduces, size_t extra, shoal_plan_t *plan);
shoal_status_t shoal_put_extra(shoal_plan_t *plan, size_t bytes, void **buf_p);
/* Exchange ctrl[r] with every peer: ctrl[j] is j's. */
shoal_status_t shoal_put_keys_all(shoal_team_t *team, shoal_put_ctrl_t *ctrl, shoal_xfer_t *x,
                                  uint64_t deadline);
/* The root sends ctrl[root] to every other rank, which receives it there. */
shoal_status_t shoal_put_keys_root(shoal_team_t *team, int root, shoal_put_ctrl_t *ctrl,
                                   shoal_xfer_t *x, uint64_t deadline);
/* Run the slot algorithm in self's place, on every rank alike. */
shoal_status_t shoal_put_run_fallback(shoal_plan_t *plan, const shoal_algo_ops_t *self);
/* Some rank offered no key: skip the exchange for a while (the same
 * decision on every rank), then fall back. */
shoal_status_t shoal_put_declined(shoal_plan_t *plan, const shoal_algo_ops_t *self);
/* A call of a plan that is skipping the exchange: 1 (go straight to the
 * fallback), counted. */
int shoal_put_skipping(shoal_plan_t *plan);

#endif
