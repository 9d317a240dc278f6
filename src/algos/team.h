/* The team: what the algorithms see of a communicator. Its ranks, the
 * endpoint to each peer and the transports that move their pieces, the
 * pipeline piece, the deadline length, the kernels, the cluster view and
 * the cost context selection reads, the running operation's header and
 * counters, and the algorithms' own memory of past calls (the selection
 * memo and the cached plans). The communicator (core/comm.h) embeds one and
 * keeps everything else (bootstrap, executor, faults, registrations,
 * shrink); what the schedules must ask of it (a fault watch, the reason of
 * a failure, a registration) goes through the hooks it sets. */
#ifndef SHOAL_TEAM_H
#define SHOAL_TEAM_H

#include "kernels.h"
#include "topo/cluster.h"
#include "topo/links.h"
#include "transport/transport.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SHOAL_MAX_TRANSPORTS 4
/* Collective kinds the memo and the plan cache hold one entry for. */
#define SHOAL_ALGO_MEMO_KINDS 16

struct shoal_team;
struct shoal_plan;

/* One-sided messages (core/rma.h) travel in the endpoints' FIFOs between
 * the operations' pieces, at any time. Their header's byte
 * SHOAL_HDR_KIND_AT (a signature's kind, core/sig.h) is
 * SHOAL_HDR_KIND_RMA, which no operation's signature has: every receive
 * (shoal_team_recv_slot) hands them to the owner and looks further. */
#define SHOAL_HDR_KIND_AT 16
#define SHOAL_HDR_KIND_RMA 0xf7u

/* The cost model's last choice for one collective and the arguments it
 * was made for (select.c). */
typedef struct {
    const void *algo; /* const shoal_algo_ops_t *; NULL before the first */
    size_t count;
    int dtype, op, root;
    unsigned settings; /* shoal_config_generation() then */
} shoal_algo_memo_t;

/* What a schedule asks of the team's owner. */
typedef struct shoal_team_hooks {
    size_t size; /* sizeof(shoal_team_hooks_t) */
    /* A wait has gone on for a while: SHOAL_OK to go on, or the error of
     * a rank that died or failed elsewhere. */
    shoal_status_t (*watch)(struct shoal_team *team);
    /* Why the running operation is about to fail, for its error message
     * (the first reason is kept). */
    void (*cause)(struct shoal_team *team, const char *text);
    /* A piece from peer carries header hdr (SHOAL_TL_HDR_BYTES), not the
     * running operation's: logs both and returns SHOAL_ERR_MISMATCH. */
    shoal_status_t (*mismatch)(struct shoal_team *team, int peer, const void *hdr);
    /* Transport tl's registration (tl indexes tl_ctx) of the memory that
     * holds [buf, buf + len), registering a shareable block on first use;
     * NULL when there is none. */
    shoal_mem_t *(*mem_of)(struct shoal_team *team, int tl, const void *buf, size_t len);
    /* A one-sided message of len bytes at buf came from peer with header
     * hdr: apply it (the caller releases it after). NULL: the owner has
     * none, and such a message is a mismatch. */
    shoal_status_t (*rma)(struct shoal_team *team, int peer, const void *hdr, const void *buf,
                          size_t len);
} shoal_team_hooks_t;

/* What selection's cost model reads besides the team's shape: the link
 * classes (topo/links.h) and the slowest link any two ranks use, for the
 * flat algorithms. */
typedef struct {
    shoal_links_t links;
    double link_lat_s;
    double link_bw_Bps;
} shoal_cost_ctx_t;

/* cost->link_lat_s and link_bw_Bps from cost->links: the flat algorithms
 * plan for the slowest link any two ranks use (between hosts when there
 * are several). */
void shoal_cost_flat(shoal_cost_ctx_t *cost, int nhosts);

typedef struct shoal_team {
    int rank;
    int nranks;
    int nhosts;
    uint64_t timeout_ns;      /* deadline length of every blocking wait */
    size_t chunk_size;        /* bytes per pipeline piece and transport slot */
    /* Hosts, local ranks, rails and ring order (topo/cluster.h). */
    shoal_cluster_t cluster;
    shoal_cost_ctx_t cost;

    shoal_ep_t **eps;         /* eps[peer]; NULL for self */
    shoal_tl_ctx_t *tl_ctx[SHOAL_MAX_TRANSPORTS]; /* open transports, NULL-terminated */
    int ntl;
    /* The one transport every endpoint uses, when there is one (waits may
     * then sleep in it); NULL when endpoints span transports. */
    shoal_tl_ctx_t *tl_sole;
    /* How long a wait polls before it yields the core between polls
     * (shoal_prims_idle): 0 where the host's ranks outnumber its CPUs. */
    uint64_t yield_after_ns;

    /* Every pass over local memory (kernels.h) and the kernels' state; the
     * host kernels' copies into slots and between buffers (move) and into
     * the output (move_out), each learning its faster kind unless
     * SHOAL_COPY names one (base/copy.h). */
    const shoal_kernels_t *kern;
    void *kern_ctx;
    shoal_copier_t copy_move, copy_out;

    /* The running operation: the header every piece carries (its
     * signature, set by the owner) and whether its output streams past the
     * caches (shoal_move_out). */
    unsigned char hdr[SHOAL_TL_HDR_BYTES];
    int stream_out;
    /* Payload bytes this rank posted to and took from its endpoints over
     * the team's life (prims.c, xfer.c). */
    uint64_t tx_bytes, rx_bytes;
    /* How long this rank's blocking waits lasted, by peer: [2 * peer] for
     * data from it, [2 * peer + 1] for room in its slots (prims.c), and
     * [2 * nranks] how many waits there were; NULL: not kept. A wait counts
     * from the end of its first busy polls (shoal_idle_t.since_ns), so that
     * the short ones read no clock. Written by the one thread running the
     * team's operations. */
    _Atomic uint64_t *waited_ns;
    /* Set by an abort from any thread; every wait polls it. */
    atomic_int aborted;
    /* Set once the owner takes part in one-sided traffic (core/rma.h):
     * waits then take one-sided messages from every peer's FIFO, so that a
     * peer's puts never wait for this rank to read that peer. */
    atomic_int rma_on;

    shoal_algo_memo_t memo[SHOAL_ALGO_MEMO_KINDS]; /* select.c, per collective kind */
    struct shoal_plan *plans[SHOAL_ALGO_MEMO_KINDS]; /* plan.c, per collective kind */

    const shoal_team_hooks_t *hooks;
} shoal_team_t;

/* Peer's endpoint; NULL for self. */
static inline shoal_ep_t *shoal_team_ep(const shoal_team_t *team, int peer)
{
    return team->eps[peer];
}

/* Account a wait on peer (dir 0: for its data, 1: for room in its slots)
 * that began at t0_ns. */
static inline void shoal_team_waited(shoal_team_t *team, int peer, int dir, uint64_t t0_ns,
                                     uint64_t now_ns)
{
    _Atomic uint64_t *w = team->waited_ns;
    if (!w)
        return;
    size_t i = 2 * (size_t)peer + (size_t)dir, n = 2 * (size_t)team->nranks;
    atomic_store_explicit(&w[i], atomic_load_explicit(&w[i], memory_order_relaxed) +
                                     (now_ns - t0_ns), memory_order_relaxed);
    atomic_store_explicit(&w[n], atomic_load_explicit(&w[n], memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* shoal_team_recv_slot's slow path: the message at *buf_p with header hdr
 * is one-sided; hand it and the one-sided messages after it to the owner
 * (hooks->rma), releasing each, and leave the next one in their place. */
shoal_status_t shoal_team_rma_take(shoal_team_t *team, shoal_ep_t *ep, const void **buf_p,
                                   size_t *len_p, unsigned char *hdr);

/* The oldest arrived message of ep (its transport's recv_slot, with its
 * header into hdr_p, SHOAL_TL_HDR_BYTES) that is not a one-sided message:
 * those before it are handed to the owner and released on the way. */
static inline shoal_status_t shoal_team_recv_slot(shoal_team_t *team, shoal_ep_t *ep,
                                                  const void **buf_p, size_t *len_p,
                                                  void *hdr_p)
{
    unsigned char *hdr = hdr_p;
    shoal_status_t s = ep->ops->recv_slot(ep, buf_p, len_p, hdr);
    if (s != SHOAL_OK || hdr[SHOAL_HDR_KIND_AT] != SHOAL_HDR_KIND_RMA)
        return s;
    return shoal_team_rma_take(team, ep, buf_p, len_p, hdr);
}
/* Where team->rma_on: take the one-sided messages at the head of every
 * connected peer's FIFO (as far as the first one that is not), so that a
 * wait for anything lets peers' puts go on. A peer that fails here is left
 * for the operation that needs it to find; a peer with no connection yet
 * (ep->offline) is skipped, as a peer that puts connects first. */
shoal_status_t shoal_team_rma_drain(shoal_team_t *team);

/* Progress every open transport of team. */
shoal_status_t shoal_team_progress(shoal_team_t *team);
/* A wait that has found nothing for waited_ns: let the transport sleep
 * until a peer may have moved something (see the transports' sleep op).
 * Only a team whose endpoints all use one transport sleeps (another one
 * that needs polling would stall meanwhile); SHOAL_ERR_UNSUPPORTED
 * otherwise. */
shoal_status_t shoal_team_sleep(shoal_team_t *team, uint64_t waited_ns, uint64_t timeout_ns);
/* The hooks, formatted where they take text. */
shoal_status_t shoal_team_watch(shoal_team_t *team);
void shoal_team_cause(shoal_team_t *team, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
shoal_status_t shoal_team_mismatch(shoal_team_t *team, int peer, const void *hdr);

#endif
