/* Zero-copy all-gather, all-to-all and broadcast over shared memory: every
 * rank writes its blocks straight into the peers' output buffers
 * (put_signal) and signals, instead of streaming them through slot FIFOs
 * where the receiver copies them a second time.
 *
 * A rank can only write a peer's buffer that the peer's transport exposes
 * (over shm: shareable memory from shoal_mem_alloc, which peers map, or
 * private memory, which they reach by cross-memory attach where the ranks
 * found it permitted and faster at the buffer's length), and only after the
 * peer has entered the call (before, the peer may still be reading that
 * buffer's previous contents). So every call starts with a small control
 * message to each rank that writes into this one: the remote key of this
 * rank's output buffer, or "no key". Receiving a peer's key is therefore
 * also the peer's permission to write. The keys decide collectively:
 * - all-gather, all-to-all: every rank sends its key to every other, so
 *   every rank sees the same n answers; if any is "no key", all ranks run
 *   the slot algorithm the cost model would otherwise have chosen;
 * - broadcast: the non-roots send their keys to the root. When the root's
 *   own input has a key, the root sends it to every peer ("pull"), each
 *   peer reads the data itself, all side by side, and tells the root it
 *   is done (the root keeps its input until then); a peer that cannot
 *   attach it asks for the data, which the root sends through slots.
 *   Otherwise the root tells each peer "fall back" when any key is
 *   missing, or writes and signals.
 * A key that a rank cannot attach (say, /proc is not readable between the
 * two processes) costs no agreement: that one writer sends a "data"
 * control message and the block through slots, and the receiver, which
 * takes either a signal or that message first, copies it.
 *
 * Keys are attached through the endpoint's cache (transport.h), so a
 * buffer used again maps nothing new; the exchange itself is repeated
 * every call, as it is the permission to write and it tells freed or
 * reallocated buffers apart.
 *
 * A call whose ranks did not all offer keys falls back, and the plan then
 * runs the fallback straight away for the next PUT_SKIP_MIN calls of its
 * shape, doubling up to PUT_SKIP_MAX while the buffers stay unshareable:
 * a program that never uses shareable memory pays one control round in
 * hundreds of calls, not one per call. Every rank counts the same calls
 * and saw the same answers, so all skip alike. */
#include "algo.h"

#include "base/clock.h"
#include "base/dtype.h"
#include "base/log.h"

#include <string.h>

/* Below this many bytes of output per rank the control round costs more
 * than the copy it saves; the model then never picks the algorithm, which
 * SHOAL_ALGO can still force. */
#define PUT_MIN_BYTES (256u * 1024)
#define PUT_UNPICKED 1e6
/* Share of the slot algorithm's time the direct one is charged: one copy
 * per byte instead of two, without the pipeline's hops. */
#define PUT_SPEEDUP 0.5

#define PUT_SKIP_MIN 16u
#define PUT_SKIP_MAX 1024u

enum { PUT_KEY = 1, PUT_NOKEY, PUT_FALLBACK, PUT_DATA, PUT_PULL, PUT_DONE };

/* What a peer's first message may be, besides a signal and PUT_DATA. */
enum {
    ROLE_WRITER = 0,  /* nothing else */
    ROLE_BCAST_PEER,  /* a broadcast's non-root: PUT_FALLBACK, PUT_PULL */
    ROLE_PULL_ROOT,   /* a pulled broadcast's root: PUT_DONE, PUT_NOKEY */
};

typedef struct {
    uint32_t type;
    uint32_t keylen;
    unsigned char key[SHOAL_TL_RKEY_MAX];
} put_ctrl_t;

/* One peer's part of the call. */
typedef struct {
    int peer;
    shoal_ep_t *ep;
    /* What this rank writes to the peer: bytes from src at off in the
     * peer's buffer. */
    const void *src;
    size_t bytes;
    size_t off;
    const shoal_rmem_t *rmem; /* NULL: through slots */
    int role;
    int send_state;
    const put_ctrl_t *reply;  /* what ST_CTRL posts */
    /* What the peer writes to this rank, at dst. */
    void *dst;
    size_t rbytes;
    int recv_state;
    shoal_xfer_t sx, rx;      /* slot transfers of the data fallback */
} put_peer_t;

enum { ST_IDLE = 0, ST_CTRL, ST_XFER, ST_FLUSH, ST_DONE };

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

static double put_cost_of(const shoal_team_t *team, const shoal_coll_args_t *args,
                          const shoal_algo_ops_t *self)
{
    if (team->nranks < 2 || team->nhosts != 1)
        return -1;
    /* Only a transport that writes into peers' memory (shm) can serve it;
     * one whose put_signal is the shared stub (tcp, the simulator's) never
     * could, and its control messages would be wasted. */
    if (!team->tl_sole || team->tl_sole->ops->put_signal == shoal_tl_stub_put_signal)
        return -1;
    double fb_cost;
    if (!put_fallback(team, args, self, &fb_cost))
        return -1;
    if (shoal_algo_bytes(args, args->count) < PUT_MIN_BYTES)
        return PUT_UNPICKED;
    return fb_cost * PUT_SPEEDUP;
}

/* This rank's control message for its buffer [buf, buf + len): a key when
 * the transport lets peers reach it, whether it is registered (shareable
 * blocks are, on first use) or private memory it reaches without. */
static void put_own_key(shoal_team_t *team, void *buf, size_t len, put_ctrl_t *c)
{
    memset(c, 0, sizeof(*c));
    c->type = PUT_NOKEY;
    shoal_tl_ctx_t *ctx = team->tl_sole;
    if (!ctx || !buf || len == 0)
        return;
    int t = 0;
    while (t < team->ntl && team->tl_ctx[t] != ctx)
        t++;
    if (t == team->ntl)
        return;
    shoal_mem_t *mem = team->hooks->mem_of(team, t, buf, len);
    size_t klen = sizeof(c->key);
    if (ctx->ops->rkey_pack(ctx, mem, buf, len, c->key, &klen) == SHOAL_OK) {
        c->type = PUT_KEY;
        c->keylen = (uint32_t)klen;
    }
}

/* A one-piece control message c to ep; SHOAL_INPROGRESS while no slot. */
static shoal_status_t put_post(shoal_team_t *team, shoal_ep_t *ep, const put_ctrl_t *c)
{
    void *slot;
    size_t cap;
    shoal_status_t s = ep->ops->send_slot(ep, &slot, &cap);
    if (s != SHOAL_OK)
        return s;
    memcpy(slot, c, sizeof(*c));
    return ep->ops->send_post(ep, sizeof(*c), team->hdr);
}

static shoal_status_t put_post_ctrl(shoal_team_t *team, shoal_ep_t *ep, uint32_t type)
{
    put_ctrl_t c = {.type = type};
    return put_post(team, ep, &c);
}

static const put_ctrl_t put_done_msg = {.type = PUT_DONE};
static const put_ctrl_t put_nokey_msg = {.type = PUT_NOKEY};

/* The first message of peer after the keys: a signal (its block is in
 * place), or a control message (into *c_p). *type_p: 0 for a signal. */
static shoal_status_t put_take_first(shoal_team_t *team, put_peer_t *p, uint32_t *type_p,
                                     put_ctrl_t *c_p)
{
    const void *in;
    size_t len;
    unsigned char hdr[SHOAL_TL_HDR_BYTES];
    shoal_status_t s = p->ep->ops->recv_slot(p->ep, &in, &len, hdr);
    if (s != SHOAL_OK)
        return s;
    if (len == 0) {
        *type_p = 0;
    } else if (len == sizeof(put_ctrl_t)) {
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
static shoal_status_t put_send_step(shoal_team_t *team, put_peer_t *p, int *moved_p)
{
    shoal_status_t s = SHOAL_OK;
    switch (p->send_state) {
    case ST_IDLE:
        if (p->rmem) {
            s = p->ep->ops->put_signal(p->ep, p->src, NULL, p->rmem, p->off, p->bytes);
            if (s == SHOAL_OK) {
                p->send_state = ST_DONE;
                *moved_p = 1;
            }
            break;
        }
        s = put_post_ctrl(team, p->ep, PUT_DATA);
        if (s == SHOAL_OK) {
            p->sx = (shoal_xfer_t){.ep = p->ep, .buf = (void *)p->src, .bytes = p->bytes};
            p->send_state = ST_XFER;
            *moved_p = 1;
        }
        break;
    case ST_CTRL:
        s = put_post(team, p->ep, p->reply);
        if (s == SHOAL_OK) {
            p->send_state = ST_DONE;
            *moved_p = 1;
        }
        break;
    case ST_XFER:
        s = shoal_xfer_step(team, &p->sx, 1, NULL, 0, moved_p);
        if (s == SHOAL_OK && shoal_xfer_complete(&p->sx))
            p->send_state = ST_FLUSH;
        break;
    case ST_FLUSH:
        s = p->ep->ops->flush(p->ep);
        if (s == SHOAL_OK)
            p->send_state = ST_DONE;
        break;
    default:
        break;
    }
    return s == SHOAL_INPROGRESS ? SHOAL_OK : s;
}

/* A broadcast's non-root reads the root's input itself; UNSUPPORTED when
 * this endpoint cannot reach it. */
static shoal_status_t put_pull(put_peer_t *p, const put_ctrl_t *c)
{
    const shoal_rmem_t *rmem;
    shoal_status_t s = p->ep->ops->rkey_attach(p->ep, c->key, c->keylen, &rmem);
    if (s == SHOAL_OK)
        s = p->ep->ops->get(p->ep, p->dst, rmem, 0, p->rbytes);
    return s;
}

static shoal_status_t put_recv_step(shoal_team_t *team, put_peer_t *p, int *moved_p,
                                    int *fallback_p)
{
    shoal_status_t s = SHOAL_OK;
    uint32_t type = UINT32_MAX;
    put_ctrl_t c;
    switch (p->recv_state) {
    case ST_IDLE:
        s = put_take_first(team, p, &type, &c);
        if (s != SHOAL_OK)
            break;
        *moved_p = 1;
        if (type == 0) {
            p->recv_state = ST_DONE;
        } else if (type == PUT_DATA) {
            p->rx = (shoal_xfer_t){.ep = p->ep, .buf = p->dst, .bytes = p->rbytes};
            p->recv_state = ST_XFER;
        } else if (type == PUT_FALLBACK && p->role == ROLE_BCAST_PEER && fallback_p) {
            *fallback_p = 1;
            p->recv_state = ST_DONE;
        } else if (type == PUT_PULL && p->role == ROLE_BCAST_PEER && c.keylen <= sizeof(c.key)) {
            s = put_pull(p, &c);
            if (s == SHOAL_OK) {
                p->reply = &put_done_msg;
                p->recv_state = ST_DONE;
            } else if (s == SHOAL_ERR_UNSUPPORTED) {
                /* The root sends PUT_DATA and the block through slots. */
                p->reply = &put_nokey_msg;
                s = SHOAL_OK;
            }
            p->send_state = ST_CTRL;
        } else if (type == PUT_DONE && p->role == ROLE_PULL_ROOT) {
            p->recv_state = ST_DONE;
        } else if (type == PUT_NOKEY && p->role == ROLE_PULL_ROOT) {
            p->send_state = ST_IDLE; /* rmem NULL: through slots */
            p->recv_state = ST_DONE;
        } else {
            shoal_team_cause(team, "rank %d got control message %u from rank %d where a "
                              "signal was due", team->rank, type, p->peer);
            s = SHOAL_ERR_MISMATCH;
        }
        break;
    case ST_XFER:
        s = shoal_xfer_step(team, NULL, 0, &p->rx, 1, moved_p);
        if (s == SHOAL_OK && shoal_xfer_complete(&p->rx))
            p->recv_state = ST_DONE;
        break;
    default:
        break;
    }
    return s == SHOAL_INPROGRESS ? SHOAL_OK : s;
}

/* Drive every peer's sides to the end, or to the deadline. */
static shoal_status_t put_drive(shoal_team_t *team, put_peer_t *peers, int np,
                                uint64_t deadline, int *fallback_p)
{
    shoal_idle_t w = {0};
    for (;;) {
        int moved = 0, left = 0;
        for (int i = 0; i < np; i++) {
            put_peer_t *p = &peers[i];
            shoal_status_t s = put_send_step(team, p, &moved);
            if (s == SHOAL_OK)
                s = put_recv_step(team, p, &moved, fallback_p);
            if (s != SHOAL_OK)
                return s;
            left += p->send_state != ST_DONE || p->recv_state != ST_DONE;
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
    return (size_t)team->nranks *
           (sizeof(put_peer_t) + sizeof(put_ctrl_t) + 2 * sizeof(shoal_xfer_t));
}

static shoal_status_t put_mem(shoal_plan_t *plan, put_peer_t **peers_p,
                              put_ctrl_t **ctrl_p, shoal_xfer_t **x_p)
{
    size_t n = (size_t)plan->prims.team->nranks;
    void *mem;
    shoal_status_t s = shoal_plan_scratch(plan, put_mem_bytes(plan->prims.team), &mem);
    if (s != SHOAL_OK)
        return s;
    *peers_p = mem;
    *ctrl_p = (put_ctrl_t *)(*peers_p + n);
    *x_p = (shoal_xfer_t *)(*ctrl_p + n);
    return SHOAL_OK;
}

static shoal_status_t put_run_fallback(shoal_plan_t *plan, const shoal_algo_ops_t *self)
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

/* Some rank offered no key: skip the exchange for a while (the same
 * decision on every rank), then fall back. */
static shoal_status_t put_declined(shoal_plan_t *plan, const shoal_algo_ops_t *self)
{
    plan->skip_len = plan->skip_len ? plan->skip_len * 2 : PUT_SKIP_MIN;
    if (plan->skip_len > PUT_SKIP_MAX)
        plan->skip_len = PUT_SKIP_MAX;
    plan->skip = plan->skip_len;
    return put_run_fallback(plan, self);
}

/* A call of a plan that is skipping the exchange: straight to the fallback. */
static int put_skipping(shoal_plan_t *plan)
{
    if (!plan->skip)
        return 0;
    plan->skip--;
    return 1;
}

/* All-gather and all-to-all: keys to and from everyone. block(j) is this
 * rank's block for rank j (src), placed at off in j's buffer. */
static shoal_status_t put_symmetric(shoal_plan_t *plan, const shoal_algo_ops_t *self)
{
    shoal_team_t *team = plan->prims.team;
    const shoal_coll_args_t *a = &plan->args;
    int n = team->nranks, r = team->rank;
    size_t bytes = a->count * plan->esize;
    char *out = a->recvbuf;
    const char *in = a->sendbuf;
    int a2a = a->kind == SHOAL_COLL_ALLTOALL;
    /* This rank's own block, in place unless an all-gather's input is
     * already there. */
    if (n > 1 && bytes && put_skipping(plan))
        return put_run_fallback(plan, self);
    const char *own = a2a ? in + (size_t)r * bytes : in;
    if (bytes && own != out + (size_t)r * bytes)
        shoal_move_out(team, out + (size_t)r * bytes, own, bytes);
    if (n == 1 || bytes == 0)
        return SHOAL_OK;
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);
    put_peer_t *peers;
    put_ctrl_t *ctrl;
    shoal_xfer_t *x;
    shoal_status_t s = put_mem(plan, &peers, &ctrl, &x);
    if (s != SHOAL_OK)
        return s;
    put_own_key(team, out, (size_t)n * bytes, &ctrl[r]);
    size_t m = (size_t)n - 1;
    for (int k = 1; k < n; k++) {
        int j = (r + k) % n;
        x[k - 1] = (shoal_xfer_t){.ep = shoal_team_ep(team, j), .buf = &ctrl[r],
                                  .bytes = sizeof(put_ctrl_t)};
        x[m + k - 1] = (shoal_xfer_t){.ep = shoal_team_ep(team, j), .buf = &ctrl[j],
                                      .bytes = sizeof(put_ctrl_t)};
    }
    s = shoal_xfer_run(team, x, m, x + m, m, deadline);
    if (s != SHOAL_OK)
        return s;
    for (int j = 0; j < n; j++) {
        if (ctrl[j].type != PUT_KEY)
            return put_declined(plan, self);
    }
    plan->skip_len = 0;
    for (int k = 1; k < n; k++) {
        int j = (r + k) % n;
        put_peer_t *p = &peers[k - 1];
        *p = (put_peer_t){.peer = j, .ep = shoal_team_ep(team, j), .bytes = bytes,
                          .off = (size_t)r * bytes, .dst = out + (size_t)j * bytes,
                          .rbytes = bytes};
        p->src = a2a ? in + (size_t)j * bytes : in;
        if (p->ep->ops->rkey_attach(p->ep, ctrl[j].key, ctrl[j].keylen, &p->rmem) != SHOAL_OK)
            p->rmem = NULL;
    }
    return put_drive(team, peers, n - 1, deadline, NULL);
}

static shoal_status_t put_broadcast(shoal_plan_t *plan, const shoal_algo_ops_t *self)
{
    shoal_team_t *team = plan->prims.team;
    const shoal_coll_args_t *a = &plan->args;
    int n = team->nranks, r = team->rank, root = a->root;
    size_t bytes = a->count * plan->esize;
    if (n > 1 && bytes && put_skipping(plan))
        return put_run_fallback(plan, self);
    if (r == root && bytes && a->sendbuf != a->recvbuf)
        shoal_move_out(team, a->recvbuf, a->sendbuf, bytes);
    if (n == 1 || bytes == 0)
        return SHOAL_OK;
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);
    put_peer_t *peers;
    put_ctrl_t *ctrl;
    shoal_xfer_t *x;
    shoal_status_t s = put_mem(plan, &peers, &ctrl, &x);
    if (s != SHOAL_OK)
        return s;
    if (r != root) {
        put_own_key(team, a->recvbuf, bytes, &ctrl[r]);
        x[0] = (shoal_xfer_t){.ep = shoal_team_ep(team, root), .buf = &ctrl[r],
                              .bytes = sizeof(put_ctrl_t)};
        s = shoal_xfer_run(team, x, 1, NULL, 0, deadline);
        if (s != SHOAL_OK)
            return s;
        int fallback = 0;
        peers[0] = (put_peer_t){.peer = root, .ep = shoal_team_ep(team, root),
                                .role = ROLE_BCAST_PEER, .send_state = ST_DONE,
                                .dst = a->recvbuf, .rbytes = bytes};
        s = put_drive(team, peers, 1, deadline, &fallback);
        if (s == SHOAL_OK && !fallback)
            plan->skip_len = 0;
        return s == SHOAL_OK && fallback ? put_declined(plan, self) : s;
    }
    size_t m = (size_t)n - 1;
    int all_keys = 1;
    for (int k = 1; k < n; k++) {
        int j = (root + k) % n;
        x[k - 1] = (shoal_xfer_t){.ep = shoal_team_ep(team, j), .buf = &ctrl[j],
                                  .bytes = sizeof(put_ctrl_t)};
    }
    s = shoal_xfer_run(team, NULL, 0, x, m, deadline);
    if (s != SHOAL_OK)
        return s;
    /* The peers read the input side by side, where the root would write
     * every copy itself one after another. */
    const void *input = a->sendbuf ? a->sendbuf : a->recvbuf;
    put_own_key(team, (void *)input, bytes, &ctrl[r]);
    if (ctrl[r].type == PUT_KEY) {
        ctrl[r].type = PUT_PULL;
        for (int k = 1; k < n; k++) {
            int j = (root + k) % n;
            peers[k - 1] = (put_peer_t){.peer = j, .ep = shoal_team_ep(team, j),
                                        .src = input, .bytes = bytes, .role = ROLE_PULL_ROOT,
                                        .send_state = ST_CTRL, .reply = &ctrl[r]};
        }
        plan->skip_len = 0;
        return put_drive(team, peers, n - 1, deadline, NULL);
    }
    for (int k = 1; k < n; k++)
        all_keys &= ctrl[(root + k) % n].type == PUT_KEY;
    for (int k = 1; k < n; k++) {
        int j = (root + k) % n;
        put_peer_t *p = &peers[k - 1];
        *p = (put_peer_t){.peer = j, .ep = shoal_team_ep(team, j), .src = a->recvbuf,
                          .bytes = bytes, .recv_state = ST_DONE};
        if (!all_keys)
            continue;
        if (p->ep->ops->rkey_attach(p->ep, ctrl[j].key, ctrl[j].keylen, &p->rmem) != SHOAL_OK)
            p->rmem = NULL;
    }
    if (!all_keys) {
        /* Every peer hears "fall back" before the slot algorithm starts. */
        shoal_idle_t w = {0};
        for (int k = 1; k < n && s == SHOAL_OK;) {
            s = put_post_ctrl(team, peers[k - 1].ep, PUT_FALLBACK);
            if (s == SHOAL_OK)
                k++;
            else if (s == SHOAL_INPROGRESS)
                s = shoal_prims_idle(team, deadline, &w);
        }
        return s == SHOAL_OK ? put_declined(plan, self) : s;
    }
    plan->skip_len = 0;
    return put_drive(team, peers, n - 1, deadline, NULL);
}

static shoal_status_t put_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                               shoal_plan_t *plan)
{
    if (args->kind != SHOAL_COLL_ALLGATHER && args->kind != SHOAL_COLL_ALLTOALL &&
        args->kind != SHOAL_COLL_BROADCAST)
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = shoal_plan_init(team, args, 0, plan);
    if (s != SHOAL_OK)
        return s;
    for (int j = 0; j < team->nranks; j++) {
        if (j != team->rank && !shoal_team_ep(team, j))
            return SHOAL_ERR_INTERNAL;
    }
    shoal_plan_reserve(plan, put_mem_bytes(team));
    return SHOAL_OK;
}

static double put_allgather_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    return put_cost_of(team, args, &shoal_put_allgather_ops);
}

static double put_alltoall_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    if (args->kind != SHOAL_COLL_ALLTOALL)
        return -1;
    return put_cost_of(team, args, &shoal_put_alltoall_ops);
}

/* The peers now read the root's input side by side (the root wrote every
 * copy itself before). On the 2-core machine of the README's figures the
 * pull from shareable memory beat the chain at 16 MiB on 2 and 4 ranks
 * but not at 128 MiB on 4 ranks (medians of 5 on a loaded machine), and
 * from private memory cross-memory reads lose to the slots there: not
 * faster everywhere, so the model still leaves it to SHOAL_ALGO. */
static double put_broadcast_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double c = put_cost_of(team, args, &shoal_put_broadcast_ops);
    return c < 0 ? c : PUT_UNPICKED;
}

static shoal_status_t put_allgather_run(shoal_plan_t *plan)
{
    return put_symmetric(plan, &shoal_put_allgather_ops);
}

static shoal_status_t put_alltoall_run(shoal_plan_t *plan)
{
    return put_symmetric(plan, &shoal_put_alltoall_ops);
}

static shoal_status_t put_broadcast_run(shoal_plan_t *plan)
{
    return put_broadcast(plan, &shoal_put_broadcast_ops);
}

const shoal_algo_ops_t shoal_put_allgather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_allgather_cost,
    .plan = put_plan,
    .run = put_allgather_run,
};

const shoal_algo_ops_t shoal_put_alltoall_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_alltoall_cost,
    .plan = put_plan,
    .run = put_alltoall_run,
};

const shoal_algo_ops_t shoal_put_broadcast_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_broadcast_cost,
    .plan = put_plan,
    .run = put_broadcast_run,
};
