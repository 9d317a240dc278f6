/* The pipeline primitives. Each waits for a free send slot and/or an
 * arrived piece, then moves the piece with at most one pass over memory
 * per output: reductions write straight into the send slot, which for shm
 * is the next rank's memory. */
#include "prims.h"

#include "base/clock.h"
#include "base/log.h"

#include <pthread.h>
#include <sched.h>

/* Busy-poll this many times between the checks of deadline, faults, sleep
 * and yield. */
#define PRIMS_SPINS 64
/* The longest sleep of a wait: aborts, deaths and deadlines are seen
 * within it. */
#define PRIMS_SLEEP_NS 1000000u

shoal_status_t shoal_prims_idle(shoal_team_t *team, uint64_t deadline_ns, shoal_idle_t *w)
{
    shoal_status_t s = shoal_team_progress(team);
    if (s != SHOAL_OK)
        return s;
    if (atomic_load_explicit(&team->aborted, memory_order_relaxed))
        return SHOAL_ERR_ABORTED;
    if (++w->spins < PRIMS_SPINS)
        return SHOAL_OK;
    w->spins = 0;
    /* Peers' one-sided messages, off the busy polls: a wait this long may
     * be for a peer whose put waits for room in this rank's FIFO. */
    s = shoal_team_rma_drain(team);
    if (s != SHOAL_OK)
        return s;
    if (shoal_deadline_passed(deadline_ns))
        return SHOAL_ERR_TIMEOUT;
    /* A long wait may be for a rank that died or failed elsewhere. */
    s = shoal_team_watch(team);
    if (s != SHOAL_OK)
        return s;
    uint64_t now = shoal_now_ns();
    if (w->since_ns == 0)
        w->since_ns = now;
    s = shoal_team_sleep(team, now - w->since_ns, PRIMS_SLEEP_NS);
    if (s == SHOAL_OK)
        return SHOAL_OK;
    if (s != SHOAL_INPROGRESS && s != SHOAL_ERR_UNSUPPORTED)
        return s;
    /* A yield where every rank has its own CPU is a system call in the
     * way of the answer: with 2 ranks on 2 CPUs, an 8-byte all-reduce
     * took 1.1 to 1.6 us with one every 64 polls and 0.6 without. */
    if (now - w->since_ns >= team->yield_after_ns)
        sched_yield();
    return SHOAL_OK;
}

static uint64_t yield_ns;
static pthread_once_t yield_once = PTHREAD_ONCE_INIT;

/* The median of 9 timed yields. */
static void yield_measure(void)
{
    uint64_t t[9];
    for (int i = 0; i < 9; i++) {
        uint64_t t0 = shoal_now_ns();
        sched_yield();
        t[i] = shoal_now_ns() - t0;
    }
    uint64_t m = shoal_median_ns(t, 9);
    yield_ns = m > 0 ? m : 1;
}

uint64_t shoal_prims_yield_after(int crowded)
{
    if (crowded)
        return 0;
    pthread_once(&yield_once, yield_measure);
    return SHOAL_YIELD_SHARE * yield_ns;
}

/* Counted in team->tx_bytes. */
shoal_status_t shoal_prims_post(shoal_prims_t *p, size_t bytes)
{
    p->team->tx_bytes += bytes;
    return p->send_ep->ops->send_post(p->send_ep, bytes, p->team->hdr);
}

static shoal_status_t prims_idle(shoal_prims_t *p, shoal_idle_t *w)
{
    return shoal_prims_idle(p->team, p->deadline_ns, w);
}

shoal_status_t shoal_prims_wait_send(shoal_prims_t *p, size_t bytes, void **buf_p)
{
    shoal_ep_t *ep = p->send_ep;
    shoal_idle_t wait = {0, 0};
    for (;;) {
        size_t cap;
        shoal_status_t s = ep->ops->send_slot(ep, buf_p, &cap);
        if (s == SHOAL_OK) {
            if (wait.since_ns)
                shoal_team_waited(p->team, ep->peer, 1, wait.since_ns, shoal_now_ns());
            if (cap < bytes) {
                shoal_error(ALGO, "piece of %zu B exceeds the %zu B slot to rank %d", bytes,
                            cap, ep->peer);
                return SHOAL_ERR_INTERNAL;
            }
            return SHOAL_OK;
        }
        if (s == SHOAL_INPROGRESS && p->poll)
            return s;
        if (s != SHOAL_INPROGRESS || (s = prims_idle(p, &wait)) != SHOAL_OK) {
            if (s == SHOAL_ERR_TIMEOUT)
                shoal_team_cause(p->team, "rank %d waited for rank %d to make room for "
                                  "more data until the deadline", p->team->rank, ep->peer);
            return s;
        }
    }
}

shoal_status_t shoal_prims_wait_recv(shoal_prims_t *p, size_t bytes, const void **buf_p)
{
    shoal_ep_t *ep = p->recv_ep;
    shoal_idle_t wait = {0, 0};
    for (;;) {
        size_t len;
        unsigned char hdr[SHOAL_TL_HDR_BYTES];
        shoal_status_t s = shoal_team_recv_slot(p->team, ep, buf_p, &len, hdr);
        if (s == SHOAL_OK) {
            if (wait.since_ns)
                shoal_team_waited(p->team, ep->peer, 0, wait.since_ns, shoal_now_ns());
            /* Before a byte of it is read: a piece of another operation. */
            if (memcmp(hdr, p->team->hdr, sizeof(hdr)))
                return shoal_team_mismatch(p->team, ep->peer, hdr);
            if (len != bytes) {
                shoal_error(ALGO, "rank %d: got %zu B from rank %d where %zu B were due",
                            p->team->rank, len, ep->peer, bytes);
                return SHOAL_ERR_INTERNAL;
            }
            p->team->rx_bytes += len;
            return SHOAL_OK;
        }
        if (s == SHOAL_INPROGRESS && p->poll)
            return s;
        if (s != SHOAL_INPROGRESS || (s = prims_idle(p, &wait)) != SHOAL_OK) {
            if (s == SHOAL_ERR_TIMEOUT)
                shoal_team_cause(p->team, "rank %d waited for data from rank %d until the "
                                  "deadline", p->team->rank, ep->peer);
            return s;
        }
    }
}

shoal_status_t shoal_prims_wait_pair(shoal_prims_t *p, size_t bytes, const void **in_p,
                                     void **out_p)
{
    *out_p = NULL;
    /* A poll looks at the slot out first: a piece in that it counted and
     * then left for a later try would be counted twice. */
    if (p->poll && p->send_ep) {
        shoal_status_t s = shoal_prims_wait_send(p, bytes, out_p);
        return s == SHOAL_OK ? shoal_prims_wait_recv(p, bytes, in_p) : s;
    }
    shoal_status_t s = shoal_prims_wait_recv(p, bytes, in_p);
    if (s == SHOAL_OK && p->send_ep)
        s = shoal_prims_wait_send(p, bytes, out_p);
    return s;
}

shoal_status_t shoal_prims_pass_on(shoal_prims_t *p, size_t bytes, void *out)
{
    shoal_status_t s = p->recv_ep->ops->recv_release(p->recv_ep);
    if (s != SHOAL_OK || !out)
        return s;
    return shoal_prims_post(p, bytes);
}

shoal_status_t shoal_prim_send(shoal_prims_t *p, const void *src, size_t bytes)
{
    void *out;
    shoal_status_t s = shoal_prims_wait_send(p, bytes, &out);
    if (s != SHOAL_OK)
        return s;
    shoal_move(p->team, out, src, bytes);
    return shoal_prims_post(p, bytes);
}

shoal_status_t shoal_prim_recv(shoal_prims_t *p, void *dst, size_t bytes)
{
    const void *in;
    shoal_status_t s = shoal_prims_wait_recv(p, bytes, &in);
    if (s != SHOAL_OK)
        return s;
    shoal_move_out(p->team, dst, in, bytes);
    return p->recv_ep->ops->recv_release(p->recv_ep);
}

shoal_status_t shoal_prim_recv_reduce_send(shoal_prims_t *p, const void *src, size_t bytes)
{
    const void *in;
    void *out;
    shoal_status_t s = shoal_prims_wait_pair(p, bytes, &in, &out);
    if (s != SHOAL_OK)
        return s;
    shoal_combine(p->team, p->reduce, out, in, src, bytes / p->esize, p->esize);
    return shoal_prims_pass_on(p, bytes, out);
}

shoal_status_t shoal_prim_recv_reduce_copy_send(shoal_prims_t *p, const void *src, void *dst,
                                                size_t bytes)
{
    const void *in;
    void *out;
    /* Both slots first, so that a poll takes nothing when one is missing. */
    shoal_status_t s = shoal_prims_wait_pair(p, bytes, &in, &out);
    if (s != SHOAL_OK)
        return s;
    size_t count = bytes / p->esize;
    shoal_combine(p->team, p->reduce, dst, in, src, count, p->esize);
    if (p->avg_n > 0)
        shoal_finish_avg(p->team, dst, count, p->dtype, p->avg_n);
    if (out)
        shoal_move(p->team, out, dst, bytes);
    return shoal_prims_pass_on(p, bytes, out);
}

shoal_status_t shoal_prim_recv_copy_send(shoal_prims_t *p, void *dst, size_t bytes)
{
    const void *in;
    void *out;
    shoal_status_t s = shoal_prims_wait_pair(p, bytes, &in, &out);
    if (s != SHOAL_OK)
        return s;
    shoal_move_out(p->team, dst, in, bytes);
    if (out)
        shoal_move(p->team, out, in, bytes);
    return shoal_prims_pass_on(p, bytes, out);
}

shoal_status_t shoal_prim_flush(shoal_prims_t *p)
{
    shoal_ep_t *ep = p->send_ep;
    shoal_idle_t wait = {0, 0};
    for (;;) {
        shoal_status_t s = ep ? ep->ops->flush(ep) : SHOAL_OK;
        if (s == SHOAL_INPROGRESS && p->poll)
            return s;
        if (s != SHOAL_INPROGRESS || (s = prims_idle(p, &wait)) != SHOAL_OK) {
            if (s == SHOAL_ERR_TIMEOUT)
                shoal_error(ALGO, "rank %d: data for rank %d still unsent at the deadline",
                            p->team->rank, ep->peer);
            return s;
        }
    }
}
