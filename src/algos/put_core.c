/* The core of the single-copy collectives (put.h): the cost they share,
 * keys, control messages, the key exchanges, the per-peer state machine
 * that writes, reads, or moves a block through slots when a key cannot be
 * attached, and the collective fallback with its back-off.
 *
 * Keys are attached through the endpoint's cache (transport.h), so a
 * buffer used again maps nothing new; the exchange itself is repeated
 * every call, as it is the permission to write and it tells freed or
 * reallocated buffers apart. */
#include "put.h"

#include "base/clock.h"
#include "base/dtype.h"
#include "base/log.h"

#include <sched.h>
#include <string.h>

#define PUT_SKIP_MIN 16u
#define PUT_SKIP_MAX 1024u

/* The cheapest other algorithm of the call's kind: what every rank runs
 * when the keys say no (the same choice on every rank, as the model's). */
static const shoal_algo_ops_t *put_fallback(const shoal_team_t *team,
                                            const shoal_coll_args_t *args,
                                            const shoal_algo_ops_t *self, double *cost_p)
{
    const shoal_algo_ops_t *best = NULL;
    double best_cost = 0;
    for (int i = 0;; i++) {
        const shoal_algo_ops_t *a = shoal_algo_at(args->kind, i);
        if (!a)
            break;
        if (a == self)
            continue;
        double c = a->cost(team, args);
        if (c >= 0 && (!best || c < best_cost)) {
            best = a;
            best_cost = c;
        }
    }
    *cost_p = best_cost;
    return best;
}

double shoal_put_cost(const shoal_team_t *team, const shoal_coll_args_t *args,
                      const shoal_algo_ops_t *self, double speedup, int reads)
{
    if (team->nranks < 2 || args->codec)
        return -1;
    /* Only a transport that writes into peers' memory (shm, ib) can serve
     * it; one whose put_signal is the shared stub (tcp, the simulator's)
     * never could, and its control messages would be wasted. */
    if (!team->tl_sole || team->tl_sole->ops->put_signal == shoal_tl_stub_put_signal)
        return -1;
    double fb_cost;
    if (!put_fallback(team, args, self, &fb_cost))
        return -1;
    /* Between hosts (ib, one rank per host) only registered buffers are
     * written or read. The choice does not depend on whether they are (it
     * must be the same on every rank): where a rank offers no key, the
     * schedules that write fall back together and back off (put_declined),
     * so unregistered buffers cost one exchange of keys now and then.
     * Reads wait one by one on the network: those schedules are only
     * SHOAL_ALGO's to force there. */
    if ((team->nhosts != 1 && reads) ||
        shoal_algo_bytes(args, args->count) < SHOAL_PUT_MIN_BYTES)
        return SHOAL_PUT_UNPICKED;
    return fb_cost * speedup;
}

/* A key for [buf, buf + len) when the transport lets peers reach it,
 * whether it is registered (shareable blocks are, on first use) or private
 * memory it reaches without. */
/* The registration of [buf, buf + len) on the sole transport, for the
 * transports that reach only registered memory; NULL when none. */
static shoal_mem_t *put_sole_mem(shoal_team_t *team, const void *buf, size_t len)
{
    for (int t = 0; buf && len && t < team->ntl; t++) {
        if (team->tl_ctx[t] == team->tl_sole)
            return team->hooks->mem_of(team, t, buf, len);
    }
    return NULL;
}

uint32_t shoal_put_own_key(shoal_team_t *team, void *buf, size_t len, unsigned char *key)
{
    shoal_tl_ctx_t *ctx = team->tl_sole;
    if (!ctx || !buf || len == 0)
        return 0;
    size_t klen = SHOAL_TL_RKEY_MAX;
    if (ctx->ops->rkey_pack(ctx, put_sole_mem(team, buf, len), buf, len, key, &klen) !=
        SHOAL_OK)
        return 0;
    return (uint32_t)klen;
}

/* A one-piece control message c to ep; SHOAL_INPROGRESS while no slot. */
static shoal_status_t put_post(shoal_team_t *team, shoal_ep_t *ep, const shoal_put_ctrl_t *c)
{
    void *slot;
    size_t cap;
    shoal_status_t s = ep->ops->send_slot(ep, &slot, &cap);
    if (s != SHOAL_OK)
        return s;
    memcpy(slot, c, sizeof(*c));
    return ep->ops->send_post(ep, sizeof(*c), team->hdr);
}

shoal_status_t shoal_put_post_ctrl(shoal_team_t *team, shoal_ep_t *ep, uint32_t type)
{
    shoal_put_ctrl_t c = {.type = type};
    return put_post(team, ep, &c);
}

const shoal_put_ctrl_t shoal_put_done_msg = {.type = SHOAL_PUT_DONE};
const shoal_put_ctrl_t shoal_put_nokey_msg = {.type = SHOAL_PUT_NOKEY};

/* The next message of peer: a signal (its block is in place), or a
 * control message (into *c_p). *type_p: 0 for a signal. */
static shoal_status_t put_take(shoal_team_t *team, shoal_put_peer_t *p, uint32_t *type_p,
                               shoal_put_ctrl_t *c_p)
{
    const void *in;
    size_t len;
    unsigned char hdr[SHOAL_TL_HDR_BYTES];
    shoal_status_t s = shoal_team_recv_slot(team, p->ep, &in, &len, hdr);
    if (s != SHOAL_OK)
        return s;
    if (len == 0) {
        *type_p = 0;
    } else if (len == sizeof(shoal_put_ctrl_t)) {
        if (memcmp(hdr, team->hdr, sizeof(hdr)))
            return shoal_team_mismatch(team, p->peer, hdr);
        memcpy(c_p, in, sizeof(*c_p));
        *type_p = c_p->type;
    } else {
        shoal_team_cause(team, "rank %d got a %zu-B message from rank %d where a signal or "
                          "a control message was due", team->rank, len, p->peer);
        return SHOAL_ERR_MISMATCH;
    }
    return p->ep->ops->recv_release(p->ep);
}

/* One pass over peer p's sending side; *moved_p set when anything moved. */
static shoal_status_t put_send_step(shoal_team_t *team, shoal_put_peer_t *p, int *moved_p)
{
    shoal_status_t s = SHOAL_OK;
    /* A reader's peer asked for its block: after this rank's own answer,
     * the block through slots. */
    if (p->send_state == SHOAL_PUT_ST_DONE && p->data_req == 1) {
        p->data_req = 2;
        p->rmem = NULL;
        p->send_state = SHOAL_PUT_ST_IDLE;
    }
    switch (p->send_state) {
    case SHOAL_PUT_ST_IDLE:
        if (p->rmem) {
            s = p->ep->ops->put_signal(p->ep, p->src, put_sole_mem(team, p->src, p->bytes),
                                       p->rmem, p->off, p->bytes, NULL);
            if (s == SHOAL_OK) {
                p->send_state = SHOAL_PUT_ST_DONE;
                *moved_p = 1;
            }
            if (s != SHOAL_ERR_UNSUPPORTED)
                break;
            /* A source the transport cannot write from (ib: not
             * registered): the block goes through slots, which the peer
             * takes as from a writer without its key. */
            p->rmem = NULL;
        }
        s = shoal_put_post_ctrl(team, p->ep, SHOAL_PUT_DATA);
        if (s == SHOAL_OK) {
            p->sx = (shoal_xfer_t){.ep = p->ep, .buf = (void *)p->src, .bytes = p->bytes};
            p->send_state = SHOAL_PUT_ST_XFER;
            *moved_p = 1;
        }
        break;
    case SHOAL_PUT_ST_CTRL:
        s = put_post(team, p->ep, p->reply);
        if (s == SHOAL_OK) {
            p->send_state = SHOAL_PUT_ST_DONE;
            *moved_p = 1;
        }
        break;
    case SHOAL_PUT_ST_XFER:
        s = shoal_xfer_step(team, &p->sx, 1, NULL, 0, moved_p);
        if (s == SHOAL_OK && shoal_xfer_complete(&p->sx))
            p->send_state = SHOAL_PUT_ST_FLUSH;
        break;
    case SHOAL_PUT_ST_FLUSH:
        s = p->ep->ops->flush(p->ep);
        if (s == SHOAL_OK)
            p->send_state = SHOAL_PUT_ST_DONE;
        break;
    default:
        break;
    }
    return s == SHOAL_INPROGRESS ? SHOAL_OK : s;
}

/* How long a read that failed waits for news of a failed rank. */
#define PUT_GET_NEWS_NS 100000000ull

shoal_status_t shoal_put_get(shoal_team_t *team, shoal_ep_t *ep, void *dst,
                             const shoal_rmem_t *rmem, size_t off, size_t len)
{
    shoal_status_t s = ep->ops->get(ep, dst, rmem, off, len);
    if (s == SHOAL_OK || s == SHOAL_ERR_UNSUPPORTED || s == SHOAL_ERR_PEER)
        return s;
    /* A peer that saw a rank fail leaves the operation and may free the
     * memory it offered while this rank still reads it: the read then
     * fails here, and the failure to report is that rank's, which the
     * watch learns within its interval. */
    uint64_t until = shoal_deadline_after(PUT_GET_NEWS_NS);
    do {
        shoal_status_t w = shoal_team_watch(team);
        if (w != SHOAL_OK)
            return w;
        sched_yield();
    } while (!shoal_deadline_passed(until));
    return s;
}

/* A non-root reads the root's input itself; UNSUPPORTED when this
 * endpoint cannot reach it. */
static shoal_status_t put_pull(shoal_team_t *team, shoal_put_peer_t *p,
                               const shoal_put_ctrl_t *c)
{
    const shoal_rmem_t *rmem;
    shoal_status_t s = p->ep->ops->rkey_attach(p->ep, c->key, c->keylen, &rmem);
    if (s == SHOAL_OK)
        s = shoal_put_get(team, p->ep, p->dst, rmem, p->roff, p->rbytes);
    return s;
}

/* The next of a reader's messages from its peer: PUT_DONE or PUT_NOKEY
 * (the peer has done with this rank's input, or asks for its block), and
 * PUT_DATA when this rank asked for the peer's block, in either order. */
static shoal_status_t put_reader_take(shoal_team_t *team, shoal_put_peer_t *p, uint32_t type)
{
    if ((type == SHOAL_PUT_DONE || type == SHOAL_PUT_NOKEY) && p->need_done) {
        p->need_done = 0;
        if (type == SHOAL_PUT_NOKEY)
            p->data_req = 1;
    } else if (type == SHOAL_PUT_DATA && p->need_data) {
        p->need_data = 0;
        p->rx = (shoal_xfer_t){.ep = p->ep, .buf = p->dst, .bytes = p->rbytes,
                               .reduce = p->reduce, .esize = p->esize};
        p->recv_state = SHOAL_PUT_ST_XFER;
        return SHOAL_OK;
    } else {
        shoal_team_cause(team, "rank %d got control message %u from rank %d where a "
                          "reader's answer was due", team->rank, type, p->peer);
        return SHOAL_ERR_MISMATCH;
    }
    if (!p->need_done && !p->need_data)
        p->recv_state = SHOAL_PUT_ST_DONE;
    return SHOAL_OK;
}

static shoal_status_t put_recv_step(shoal_team_t *team, shoal_put_peer_t *p, int *moved_p,
                                    int *fallback_p)
{
    shoal_status_t s = SHOAL_OK;
    uint32_t type = UINT32_MAX;
    shoal_put_ctrl_t c;
    switch (p->recv_state) {
    case SHOAL_PUT_ST_IDLE:
        s = put_take(team, p, &type, &c);
        if (s != SHOAL_OK)
            break;
        *moved_p = 1;
        if (p->role == SHOAL_PUT_ROLE_READER) {
            s = put_reader_take(team, p, type);
        } else if (type == 0) {
            p->recv_state = SHOAL_PUT_ST_DONE;
        } else if (type == SHOAL_PUT_DATA) {
            p->rx = (shoal_xfer_t){.ep = p->ep, .buf = p->dst, .bytes = p->rbytes};
            p->recv_state = SHOAL_PUT_ST_XFER;
        } else if (type == SHOAL_PUT_FALLBACK && p->role == SHOAL_PUT_ROLE_BCAST_PEER &&
                   fallback_p) {
            *fallback_p = 1;
            p->recv_state = SHOAL_PUT_ST_DONE;
        } else if (type == SHOAL_PUT_PULL && p->role == SHOAL_PUT_ROLE_BCAST_PEER &&
                   c.keylen <= sizeof(c.key)) {
            s = put_pull(team, p, &c);
            if (s == SHOAL_OK) {
                p->reply = &shoal_put_done_msg;
                p->recv_state = SHOAL_PUT_ST_DONE;
            } else if (s == SHOAL_ERR_UNSUPPORTED) {
                /* The root sends PUT_DATA and the block through slots. */
                p->reply = &shoal_put_nokey_msg;
                s = SHOAL_OK;
            }
            p->send_state = SHOAL_PUT_ST_CTRL;
        } else if (type == SHOAL_PUT_DONE && p->role == SHOAL_PUT_ROLE_PULL_ROOT) {
            p->recv_state = SHOAL_PUT_ST_DONE;
        } else if (type == SHOAL_PUT_NOKEY && p->role == SHOAL_PUT_ROLE_PULL_ROOT) {
            p->send_state = SHOAL_PUT_ST_IDLE; /* rmem NULL: through slots */
            p->recv_state = SHOAL_PUT_ST_DONE;
        } else {
            shoal_team_cause(team, "rank %d got control message %u from rank %d where a "
                              "signal was due", team->rank, type, p->peer);
            s = SHOAL_ERR_MISMATCH;
        }
        break;
    case SHOAL_PUT_ST_XFER:
        s = shoal_xfer_step(team, NULL, 0, &p->rx, 1, moved_p);
        if (s == SHOAL_OK && shoal_xfer_complete(&p->rx))
            p->recv_state = p->need_done ? SHOAL_PUT_ST_IDLE : SHOAL_PUT_ST_DONE;
        break;
    default:
        break;
    }
    return s == SHOAL_INPROGRESS ? SHOAL_OK : s;
}

shoal_status_t shoal_put_drive(shoal_team_t *team, shoal_put_peer_t *peers, int np,
                               uint64_t deadline, int *fallback_p)
{
    shoal_idle_t w = {0};
    for (;;) {
        int moved = 0, left = 0;
        for (int i = 0; i < np; i++) {
            shoal_put_peer_t *p = &peers[i];
            shoal_status_t s = put_send_step(team, p, &moved);
            if (s == SHOAL_OK)
                s = put_recv_step(team, p, &moved, fallback_p);
            if (s != SHOAL_OK)
                return s;
            left += p->send_state != SHOAL_PUT_ST_DONE || p->recv_state != SHOAL_PUT_ST_DONE ||
                    p->data_req == 1;
        }
        if (!left)
            return SHOAL_OK;
        if (!moved) {
            shoal_status_t s = shoal_prims_idle(team, deadline, &w);
            if (s != SHOAL_OK)
                return s;
        } else {
            w = (shoal_idle_t){0};
        }
    }
}

/* Working memory: the peers, the control messages, the messages. */
static size_t put_mem_bytes(const shoal_team_t *team)
{
    size_t b = (size_t)team->nranks *
               (sizeof(shoal_put_peer_t) + sizeof(shoal_put_ctrl_t) + 2 * sizeof(shoal_xfer_t));
    return (b + 63) & ~(size_t)63;
}

shoal_status_t shoal_put_mem(shoal_plan_t *plan, shoal_put_peer_t **peers_p,
                             shoal_put_ctrl_t **ctrl_p, shoal_xfer_t **x_p)
{
    size_t n = (size_t)plan->prims.team->nranks;
    void *mem;
    shoal_status_t s = shoal_plan_scratch(plan, put_mem_bytes(plan->prims.team), &mem);
    if (s != SHOAL_OK)
        return s;
    *peers_p = mem;
    *ctrl_p = (shoal_put_ctrl_t *)(*peers_p + n);
    *x_p = (shoal_xfer_t *)(*ctrl_p + n);
    return SHOAL_OK;
}

shoal_status_t shoal_put_extra(shoal_plan_t *plan, size_t bytes, void **buf_p)
{
    size_t base = put_mem_bytes(plan->prims.team);
    void *mem;
    shoal_status_t s = shoal_plan_scratch(plan, base + bytes, &mem);
    if (s == SHOAL_OK)
        *buf_p = (char *)mem + base;
    return s;
}

shoal_status_t shoal_put_plan_with(shoal_team_t *team, const shoal_coll_args_t *args,
                                   int reduces, size_t extra, shoal_plan_t *plan)
{
    shoal_status_t s = shoal_plan_init(team, args, reduces, plan);
    if (s != SHOAL_OK)
        return s;
    for (int j = 0; j < team->nranks; j++) {
        if (j != team->rank && !shoal_team_ep(team, j))
            return SHOAL_ERR_INTERNAL;
    }
    shoal_plan_reserve(plan, put_mem_bytes(team) + extra);
    return SHOAL_OK;
}

shoal_status_t shoal_put_keys_all(shoal_team_t *team, shoal_put_ctrl_t *ctrl, shoal_xfer_t *x,
                                  uint64_t deadline)
{
    int n = team->nranks, r = team->rank;
    size_t m = (size_t)n - 1;
    for (int k = 1; k < n; k++) {
        int j = (r + k) % n;
        x[k - 1] = (shoal_xfer_t){.ep = shoal_team_ep(team, j), .buf = &ctrl[r],
                                  .bytes = sizeof(shoal_put_ctrl_t)};
        x[m + k - 1] = (shoal_xfer_t){.ep = shoal_team_ep(team, j), .buf = &ctrl[j],
                                      .bytes = sizeof(shoal_put_ctrl_t)};
    }
    return shoal_xfer_run(team, x, m, x + m, m, deadline);
}

shoal_status_t shoal_put_keys_root(shoal_team_t *team, int root, shoal_put_ctrl_t *ctrl,
                                   shoal_xfer_t *x, uint64_t deadline)
{
    int n = team->nranks;
    if (team->rank != root) {
        x[0] = (shoal_xfer_t){.ep = shoal_team_ep(team, root), .buf = &ctrl[root],
                              .bytes = sizeof(shoal_put_ctrl_t)};
        return shoal_xfer_run(team, NULL, 0, x, 1, deadline);
    }
    for (int k = 1; k < n; k++) {
        x[k - 1] = (shoal_xfer_t){.ep = shoal_team_ep(team, (root + k) % n), .buf = &ctrl[root],
                                  .bytes = sizeof(shoal_put_ctrl_t)};
    }
    return shoal_xfer_run(team, x, (size_t)n - 1, NULL, 0, deadline);
}

shoal_status_t shoal_put_run_fallback(shoal_plan_t *plan, const shoal_algo_ops_t *self)
{
    shoal_team_t *team = plan->prims.team;
    double c;
    const shoal_algo_ops_t *fb = put_fallback(team, &plan->args, self, &c);
    if (!fb)
        return SHOAL_ERR_INTERNAL;
    shoal_debug(ALGO, "rank %d: %s falls back to %s", team->rank, self->name, fb->name);
    /* The fallback's plan lives with this one, made on the first fallback.
     * It runs on this run's buffers, a staged input's included: it stages
     * nothing of its own. */
    shoal_coll_args_t args = plan->args;
    args.stage_bytes = 0;
    if (!plan->fallback || plan->fallback->algo != fb) {
        shoal_plan_destroy(plan->fallback);
        plan->fallback = NULL;
        shoal_status_t s = shoal_plan_create(team, fb, &args, &plan->fallback);
        if (s != SHOAL_OK)
            return s;
    }
    return shoal_plan_run(plan->fallback, &args);
}

shoal_status_t shoal_put_declined(shoal_plan_t *plan, const shoal_algo_ops_t *self)
{
    plan->skip_len = plan->skip_len ? plan->skip_len * 2 : PUT_SKIP_MIN;
    if (plan->skip_len > PUT_SKIP_MAX)
        plan->skip_len = PUT_SKIP_MAX;
    plan->skip = plan->skip_len;
    return shoal_put_run_fallback(plan, self);
}

int shoal_put_skipping(shoal_plan_t *plan)
{
    if (!plan->skip)
        return 0;
    plan->skip--;
    return 1;
}
