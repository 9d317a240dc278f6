/* The simulated transport: the slot FIFOs of transport.h with virtual
 * clocks instead of data (sim.h says what each move costs). A rank that
 * finds nothing to do parks its fiber in progress() until a peer posts to
 * it or frees one of its slots. */
#include "sim_priv.h"

#include "base/config.h"
#include "base/log.h"

#include <string.h>

static inline shoal_sim_t *ep_sim(const shoal_ep_t *ep)
{
    return ((const shoal_sim_ctx_t *)ep->ctx)->sim;
}

static inline double max2(double a, double b)
{
    return a > b ? a : b;
}

static inline int ep_rank(const shoal_ep_t *ep)
{
    return ((const shoal_sim_ctx_t *)ep->ctx)->rank;
}

static inline int same_host(const shoal_sim_t *sim, int a, int b)
{
    return sim->host_of[a] == sim->host_of[b];
}

static inline size_t chan_depth(const shoal_sim_t *sim, int a, int b)
{
    return same_host(sim, a, b) ? sim->depth_intra : sim->depth_inter;
}

static inline shoal_sim_slot_t *chan_slot(const shoal_sim_t *sim, size_t ch, uint32_t seq,
                                          size_t depth)
{
    return &sim->slots[ch * sim->depth + seq % depth];
}


static shoal_status_t sim_send_slot(shoal_ep_t *ep, void **buf_p, size_t *cap_p)
{
    shoal_sim_t *sim = ep_sim(ep);
    int a = ep_rank(ep), b = ep->peer;
    size_t ch = (size_t)a * sim->n + b, depth = chan_depth(sim, a, b);
    uint32_t seq = sim->posted[ch];
    sim->touched[ch] = 1;
    shoal_sim_charge(sim, a);
    if (seq - sim->released[ch] >= depth)
        return SHOAL_INPROGRESS;
    if (!same_host(sim, a, b))
        shoal_sim_defer(sim, a);
    /* The slot is free since its last reader let it go. A look at a slot
     * moves nothing (active stays): a rank that polls several lanes and
     * finds each short of something must park, not spin. */
    sim->clock[a] = max2(sim->clock[a], chan_slot(sim, ch, seq, depth)->freed);
    *buf_p = sim->nomem;
    *cap_p = ((const shoal_sim_ctx_t *)ep->ctx)->team->chunk_size;
    return SHOAL_OK;
}

static shoal_status_t sim_send_post(shoal_ep_t *ep, size_t len, const void *sig)
{
    (void)sig;
    shoal_sim_t *sim = ep_sim(ep);
    int a = ep_rank(ep), b = ep->peer;
    size_t ch = (size_t)a * sim->n + b, depth = chan_depth(sim, a, b);
    uint32_t seq = sim->posted[ch];
    const shoal_links_t *l = &sim->cfg.links;
    shoal_sim_charge(sim, a); /* the piece written into the slot */
    double t = sim->clock[a];
    double arrive;
    if (same_host(sim, a, b)) {
        arrive = t + l->cls[l->intra].lat_s;
    } else {
        /* Out through the host's link, in through the peer host's. */
        const shoal_link_cost_t *net = &l->cls[l->inter];
        double wire = (double)len / net->bw_Bps;
        int ha = sim->host_of[a], hb = sim->host_of[b];
        double out_start = max2(t, sim->out_free[ha]);
        sim->out_free[ha] = out_start + wire;
        double in_end = max2(out_start, sim->in_free[hb]) + wire;
        sim->in_free[hb] = in_end;
        arrive = in_end + net->lat_s;
    }
    shoal_sim_slot_t *slot = chan_slot(sim, ch, seq, depth);
    slot->arrive = arrive;
    slot->len = (uint32_t)len;
    sim->posted[ch] = seq + 1;
    atomic_fetch_add_explicit(&ep->tx_bytes, len, memory_order_relaxed);
    sim->active[a] = 1;
    sim->poked[b] = sim->poked[b] < t ? sim->poked[b] : t;
    shoal_sim_wake(sim, b);
    return SHOAL_OK;
}

static shoal_status_t sim_recv_slot(shoal_ep_t *ep, const void **buf_p, size_t *len_p,
                                    void *sig_p)
{
    shoal_sim_t *sim = ep_sim(ep);
    int b = ep_rank(ep), a = ep->peer;
    size_t ch = (size_t)a * sim->n + b;
    uint32_t seq = sim->released[ch];
    sim->touched[(size_t)b * sim->n + a] = 1;
    shoal_sim_charge(sim, b);
    if (seq == sim->posted[ch])
        return SHOAL_INPROGRESS;
    const shoal_sim_slot_t *slot = chan_slot(sim, ch, seq, chan_depth(sim, a, b));
    /* A piece still on its way is not there yet: a rank with other work
     * (a pipelined schedule's other lane) does it first, and one without
     * moves its clock to the earliest arrival it saw (sim_progress). */
    if (slot->arrive > sim->clock[b]) {
        if (slot->arrive < sim->next_arrive[b])
            sim->next_arrive[b] = slot->arrive;
        return SHOAL_INPROGRESS;
    }
    *buf_p = sim->nomem;
    *len_p = slot->len;
    /* One operation runs at a time on every rank: the signatures agree. */
    if (sig_p)
        memcpy(sig_p, ((const shoal_sim_ctx_t *)ep->ctx)->team->hdr, SHOAL_TL_HDR_BYTES);
    return SHOAL_OK;
}

static shoal_status_t sim_recv_release(shoal_ep_t *ep)
{
    shoal_sim_t *sim = ep_sim(ep);
    int b = ep_rank(ep), a = ep->peer;
    size_t ch = (size_t)a * sim->n + b;
    uint32_t seq = sim->released[ch];
    shoal_sim_slot_t *slot = chan_slot(sim, ch, seq, chan_depth(sim, a, b));
    shoal_sim_charge(sim, b); /* the piece read out, copied or reduced */
    slot->freed = sim->clock[b];
    sim->released[ch] = seq + 1;
    atomic_fetch_add_explicit(&ep->rx_bytes, slot->len, memory_order_relaxed);
    sim->active[b] = 1;
    sim->poked[a] = sim->poked[a] < slot->freed ? sim->poked[a] : slot->freed;
    shoal_sim_wake(sim, a);
    return SHOAL_OK;
}

/* Nothing moved since the last call: the rank waits for a peer, so its
 * fiber parks until one posts to it or frees its slot. */
static shoal_status_t sim_progress(shoal_tl_ctx_t *ctx)
{
    shoal_sim_t *sim = ((shoal_sim_ctx_t *)ctx)->sim;
    int r = ((shoal_sim_ctx_t *)ctx)->rank;
    shoal_sim_charge(sim, r);
    if (!sim->deadlock) {
        if (sim->active[r]) {
            sim->active[r] = 0;
            return SHOAL_OK;
        }
        /* Waiting for a piece on its way: the rank is idle until it
         * arrives, and lets the ranks behind it in time run first. One of
         * them may hand it something sooner (a piece or a slot of its
         * other lane): then it wakes at that peer's time instead. */
        if (sim->next_arrive[r] < SIM_NEVER) {
            double was = sim->clock[r];
            sim->clock[r] = max2(was, sim->next_arrive[r]);
            sim->next_arrive[r] = sim->poked[r] = SIM_NEVER;
            shoal_sim_defer(sim, r);
            if (sim->poked[r] < sim->clock[r])
                sim->clock[r] = max2(was, sim->poked[r]);
            sim->poked[r] = SIM_NEVER;
            return SHOAL_OK;
        }
        sim->state[r] = SIM_PARKED;
        shoal_fiber_yield(sim->fibers);
        if (!sim->deadlock)
            return SHOAL_OK;
    }
    shoal_team_cause(((shoal_sim_ctx_t *)ctx)->team, "rank %d waits for a peer that never sends (the schedule "
                      "deadlocks)", r);
    return SHOAL_ERR_TIMEOUT;
}

static shoal_status_t sim_query(const shoal_tl_params_t *par, int peer, shoal_tl_caps_t *caps_p)
{
    (void)par, (void)peer;
    caps_p->reachable = 0;
    return SHOAL_OK;
}

static shoal_status_t sim_no_open(const shoal_tl_params_t *par, shoal_tl_ctx_t **ctx_p)
{
    (void)par, (void)ctx_p;
    return SHOAL_ERR_UNSUPPORTED;
}

static shoal_status_t sim_no_addr(shoal_tl_ctx_t *ctx, void *blob, size_t *len_p)
{
    (void)ctx, (void)blob, (void)len_p;
    return SHOAL_ERR_UNSUPPORTED;
}

static shoal_status_t sim_no_connect(shoal_tl_ctx_t *ctx, int peer, const void *blob,
                                     size_t len, uint64_t deadline_ns, shoal_ep_t **ep_p)
{
    (void)ctx, (void)peer, (void)blob, (void)len, (void)deadline_ns, (void)ep_p;
    return SHOAL_ERR_UNSUPPORTED;
}

/* The simulation owns endpoints and contexts (sim.c frees them). */
static void sim_disconnect(shoal_ep_t *ep)
{
    (void)ep;
}

static void sim_close(shoal_tl_ctx_t *ctx)
{
    (void)ctx;
}

/* Never in the transport list: the simulation wires its ranks itself. */
const shoal_transport_ops_t shoal_sim_ops = {
    .size = sizeof(shoal_transport_ops_t),
    .name = "sim",
    .query = sim_query,
    .open = sim_no_open,
    .addr_pack = sim_no_addr,
    .connect = sim_no_connect,
    .ready = shoal_tl_stub_ready,
    .send_slot = sim_send_slot,
    .send_post = sim_send_post,
    .recv_slot = sim_recv_slot,
    .recv_release = sim_recv_release,
    .flush = shoal_tl_stub_flush,
    .progress = sim_progress,
    .sleep = shoal_tl_stub_sleep, /* progress parks the fiber instead */
    .mem_reg = shoal_tl_host_mem_reg,
    .mem_dereg = shoal_tl_host_mem_dereg,
    .rkey_pack = shoal_tl_stub_rkey_pack,
    .rkey_attach = shoal_tl_stub_rkey_attach,
    .put_signal = shoal_tl_stub_put_signal,
    .get = shoal_tl_stub_get,
    .disconnect = sim_disconnect,
    .close = sim_close,
};

/* Peers are connected as lazy tcp connects them: a pair once either end
 * asked its endpoint for a slot. */
void shoal_sim_memory(const shoal_sim_t *sim, int rank, shoal_sim_mem_t *mem_p)
{
    const shoal_config_t *conf = shoal_config_get();
    size_t chunk = sim->ranks[rank].team.chunk_size;
    size_t n = (size_t)sim->n, r = (size_t)rank;
    shoal_sim_mem_t m = {0};
    for (size_t p = 0; p < n; p++) {
        if (p == r || same_host(sim, rank, (int)p))
            continue;
        m.peers_all++;
        m.bytes_eager += 2 * conf->tcp.nslots * chunk;
        if (sim->touched[r * n + p] || sim->touched[p * n + r]) {
            m.peers_touched++;
            m.bytes_lazy += 2 * chunk *
                            shoal_tcp_slots_rule(conf->tcp.mem, chunk, conf->tcp.nslots,
                                                 (size_t)m.peers_touched);
        }
    }
    *mem_p = m;
}

void shoal_sim_forget_peers(shoal_sim_t *sim)
{
    memset(sim->touched, 0, (size_t)sim->n * (size_t)sim->n);
}
