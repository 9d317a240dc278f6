/* The flight recorder (flight.h): a fixed set of records under one mutex.
 * Records are placed in any free slot and put in order by number only when
 * they are formatted, so that replacing the oldest finished record never
 * has to move the others. */
#include "flight.h"

#include "base/clock.h"
#include "comm.h"
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define FLIGHT_NONE ((size_t)-1)

typedef struct {
    uint64_t id;                /* 0: slot unused */
    const char *what;           /* NULL: not known (left out while queued) */
    const char *algo;
    size_t bytes;
    int has_sig;
    shoal_sig_t sig;
    shoal_flight_state_t state;
    shoal_status_t status;
    uint64_t queued_ns, started_ns, ended_ns; /* 0: not yet */
} flight_rec_t;

struct shoal_flight {
    pthread_mutex_t lock;       /* guards everything below */
    struct shoal_comm *comm;
    int rank;
    int nranks;
    size_t depth;
    flight_rec_t *recs;         /* depth slots */
    size_t *order;              /* depth: format's scratch for sorting */
    uint64_t nqueued;           /* numbers handed out */
    uint64_t running;           /* the record whose base is current; 0: none */
    unsigned long long *base;   /* 2 x nranks: tx_bytes, then rx_bytes, at start */
    unsigned long long *delta;  /* 2 x nranks: format's scratch */
};

shoal_status_t shoal_flight_create(struct shoal_comm *comm, size_t depth, shoal_flight_t **f_p)
{
    if (!f_p || (depth > 0 && (!comm || comm->team.nranks < 1))) {
        shoal_error(INIT, "flight recorder: %s", !f_p ? "NULL f_p" : "no communicator");
        return SHOAL_ERR_INVALID_ARG;
    }
    if (depth == 0) {
        *f_p = NULL;
        return SHOAL_OK;
    }
    size_t nranks = (size_t)comm->team.nranks;
    shoal_flight_t *f = calloc(1, sizeof(*f));
    if (!f)
        goto err_nomem;
    f->recs = calloc(depth, sizeof(*f->recs));
    if (!f->recs)
        goto err_free_f;
    f->order = calloc(depth, sizeof(*f->order));
    if (!f->order)
        goto err_free_recs;
    f->base = calloc(2 * nranks, sizeof(*f->base));
    if (!f->base)
        goto err_free_order;
    f->delta = calloc(2 * nranks, sizeof(*f->delta));
    if (!f->delta)
        goto err_free_base;
    pthread_mutex_init(&f->lock, NULL);
    f->comm = comm;
    f->rank = comm->team.rank;
    f->nranks = comm->team.nranks;
    f->depth = depth;
    *f_p = f;
    return SHOAL_OK;

err_free_base:
    free(f->base);
err_free_order:
    free(f->order);
err_free_recs:
    free(f->recs);
err_free_f:
    free(f);
err_nomem:
    shoal_error(INIT, "flight recorder: no memory for %zu records and %zu ranks", depth, nranks);
    return SHOAL_ERR_NO_MEMORY;
}

void shoal_flight_destroy(shoal_flight_t *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->lock);
    free(f->delta);
    free(f->base);
    free(f->order);
    free(f->recs);
    free(f);
}

/* Operation id lives in slot id % depth unless that slot was still busy
 * when it was queued (more than depth operations in flight). */
static int flight_live(const flight_rec_t *r)
{
    return r->id && (r->state == SHOAL_FLIGHT_QUEUED || r->state == SHOAL_FLIGHT_RUNNING);
}

static size_t flight_find(const shoal_flight_t *f, uint64_t id)
{
    if (f->recs[id % f->depth].id == id)
        return id % f->depth;
    for (size_t i = 0; i < f->depth; i++)
        if (f->recs[i].id == id)
            return i;
    return FLIGHT_NONE;
}

/* A free slot, else the oldest finished record's; FLIGHT_NONE when every
 * record is queued or running. */
static size_t flight_take(const shoal_flight_t *f)
{
    size_t best = FLIGHT_NONE;
    for (size_t i = 0; i < f->depth; i++) {
        const flight_rec_t *r = &f->recs[i];
        if (r->id == 0)
            return i;
        if ((r->state == SHOAL_FLIGHT_DONE || r->state == SHOAL_FLIGHT_FAILED) &&
            (best == FLIGHT_NONE || r->id < f->recs[best].id))
            best = i;
    }
    return best;
}

/* The newest queued record's slot, the least useful of the live ones. */
static size_t flight_newest_queued(const shoal_flight_t *f)
{
    size_t best = FLIGHT_NONE;
    for (size_t i = 0; i < f->depth; i++) {
        const flight_rec_t *r = &f->recs[i];
        if (r->id && r->state == SHOAL_FLIGHT_QUEUED &&
            (best == FLIGHT_NONE || r->id > f->recs[best].id))
            best = i;
    }
    return best;
}

uint64_t shoal_flight_queue(shoal_flight_t *f, const char *what, size_t bytes)
{
    if (!f)
        return 0;
    uint64_t now = shoal_coarse_now_ns();
    pthread_mutex_lock(&f->lock);
    uint64_t id = ++f->nqueued;
    size_t i = id % f->depth;
    if (flight_live(&f->recs[i]))
        i = flight_take(f);
    if (i != FLIGHT_NONE)
        f->recs[i] = (flight_rec_t){.id = id, .what = what ? what : "?", .bytes = bytes,
                                    .state = SHOAL_FLIGHT_QUEUED, .queued_ns = now};
    pthread_mutex_unlock(&f->lock);
    return id;
}

static shoal_ep_t *flight_ep(const shoal_flight_t *f, int peer)
{
    return f->comm->team.eps ? shoal_comm_ep(f->comm, peer) : NULL;
}

void shoal_flight_start(shoal_flight_t *f, uint64_t id, const char *algo, const shoal_sig_t *sig)
{
    if (!f || id == 0)
        return;
    uint64_t now = shoal_coarse_now_ns();
    pthread_mutex_lock(&f->lock);
    size_t i = flight_find(f, id);
    if (i == FLIGHT_NONE) {
        /* Left out while queued (or replaced since): the running operation
         * is the one a stall is found with, so it takes a slot anyway. */
        i = flight_take(f);
        if (i == FLIGHT_NONE)
            i = flight_newest_queued(f);
        if (i == FLIGHT_NONE)
            goto out_unlock;
        f->recs[i] = (flight_rec_t){.id = id, .queued_ns = now};
    }
    flight_rec_t *r = &f->recs[i];
    r->state = SHOAL_FLIGHT_RUNNING;
    r->algo = algo;
    r->has_sig = sig != NULL;
    if (sig)
        r->sig = *sig;
    r->started_ns = now;
    f->running = id;
    int n = f->nranks;
    for (int p = 0; p < n; p++) {
        shoal_ep_t *ep = flight_ep(f, p);
        f->base[p] = ep ? atomic_load_explicit(&ep->tx_bytes, memory_order_relaxed) : 0;
        f->base[n + p] = ep ? atomic_load_explicit(&ep->rx_bytes, memory_order_relaxed) : 0;
    }
out_unlock:
    pthread_mutex_unlock(&f->lock);
}

void shoal_flight_finish(shoal_flight_t *f, uint64_t id, shoal_status_t status)
{
    if (!f || id == 0)
        return;
    uint64_t now = shoal_coarse_now_ns();
    pthread_mutex_lock(&f->lock);
    size_t i = flight_find(f, id);
    if (i != FLIGHT_NONE) {
        flight_rec_t *r = &f->recs[i];
        r->state = status == SHOAL_OK ? SHOAL_FLIGHT_DONE : SHOAL_FLIGHT_FAILED;
        r->status = status;
        r->ended_ns = now;
    }
    if (f->running == id)
        f->running = 0;
    pthread_mutex_unlock(&f->lock);
}

/* Text into a bounded buffer that counts what it would have needed, as
 * snprintf does: the buffer keeps the first cap - 1 characters. */
typedef struct {
    char *buf;
    size_t cap;
    size_t len;
} flight_text_t;

static void text_put(flight_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_put(flight_text_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = t->len < t->cap ? vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap)
                            : vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n;
}

/* "0 B", "512 B", "4.0 KiB", ... up to EiB (out holds 16). */
static const char *flight_bytes(unsigned long long b, char out[16])
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (b < 1024) {
        snprintf(out, 16, "%llu B", b);
        return out;
    }
    double v = (double)b / 1024.0;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024.0;
        u++;
    }
    snprintf(out, 16, "%.1f %s", v, units[u]);
    return out;
}

static double flight_ms(uint64_t later_ns, uint64_t earlier_ns)
{
    return later_ns > earlier_ns ? (double)(later_ns - earlier_ns) / 1e6 : 0.0;
}

/* Which peers a capped list shows first: 0 sent to but heard nothing from,
 * 1 nothing either way, 2 received from. */
static int flight_peer_class(unsigned long long tx, unsigned long long rx)
{
    return rx ? 2 : tx ? 0 : 1;
}

static void flight_put_peer(flight_text_t *t, int peer, unsigned long long tx,
                            unsigned long long rx)
{
    char a[16], b[16];
    text_put(t, "; to r%d %s, from r%d %s", peer, flight_bytes(tx, a), peer,
             flight_bytes(rx, b));
}

/* The bytes moved with each peer since the running record started. */
static void flight_put_peers(shoal_flight_t *f, flight_text_t *t)
{
    int n = f->nranks;
    unsigned long long *dtx = f->delta, *drx = f->delta + n;
    size_t count[3] = {0, 0, 0};
    for (int p = 0; p < n; p++) {
        shoal_ep_t *ep = flight_ep(f, p);
        if (!ep)
            continue;
        unsigned long long tx = atomic_load_explicit(&ep->tx_bytes, memory_order_relaxed);
        unsigned long long rx = atomic_load_explicit(&ep->rx_bytes, memory_order_relaxed);
        /* An endpoint replaced since the start counts from zero again. */
        dtx[p] = tx >= f->base[p] ? tx - f->base[p] : tx;
        drx[p] = rx >= f->base[n + p] ? rx - f->base[n + p] : rx;
        count[flight_peer_class(dtx[p], drx[p])]++;
    }
    size_t total = count[0] + count[1] + count[2];
    const size_t max = SHOAL_FLIGHT_PEERS_MAX;
    if (total <= max) {
        for (int p = 0; p < n; p++)
            if (flight_ep(f, p))
                flight_put_peer(t, p, dtx[p], drx[p]);
        return;
    }
    /* Too many to list: the suspects first, but a quarter of the places
     * stay with peers that did send, which a ring or a tree has only a
     * few of, lest thousands of idle peers hide them. */
    size_t show[3];
    show[2] = count[2] < max / 4 ? count[2] : max / 4;
    show[0] = count[0] < max - show[2] ? count[0] : max - show[2];
    show[1] = count[1] < max - show[2] - show[0] ? count[1] : max - show[2] - show[0];
    show[2] = count[2] < max - show[0] - show[1] ? count[2] : max - show[0] - show[1];
    for (int c = 0; c < 3; c++) {
        size_t left = show[c];
        for (int p = 0; p < n && left > 0; p++) {
            if (flight_ep(f, p) && flight_peer_class(dtx[p], drx[p]) == c) {
                flight_put_peer(t, p, dtx[p], drx[p]);
                left--;
            }
        }
    }
    size_t shown = show[0] + show[1] + show[2];
    size_t silent = count[0] + count[1] - show[0] - show[1];
    text_put(t, "; ... and %zu more", total - shown);
    if (silent)
        text_put(t, ", %zu of them with 0 B received", silent);
}

static void flight_put_rec(shoal_flight_t *f, const flight_rec_t *r, uint64_t now,
                           flight_text_t *t)
{
    char b[16];
    if (r->what)
        text_put(t, "#%llu %s of %s: ", (unsigned long long)r->id, r->what,
                 flight_bytes(r->bytes, b));
    else
        text_put(t, "#%llu ?: ", (unsigned long long)r->id);
    if (r->started_ns) {
        if (r->has_sig) {
            char sig[SHOAL_SIG_STR_MAX];
            text_put(t, "%s, ", shoal_sig_format(&r->sig, sig, sizeof(sig)));
        }
        if (r->algo)
            text_put(t, "%s, ", r->algo);
    }
    switch (r->state) {
    case SHOAL_FLIGHT_QUEUED:
        text_put(t, "queued for %.1f ms", flight_ms(now, r->queued_ns));
        break;
    case SHOAL_FLIGHT_RUNNING:
        text_put(t, "running for %.1f ms", flight_ms(now, r->started_ns));
        if (f->running == r->id)
            flight_put_peers(f, t);
        break;
    case SHOAL_FLIGHT_DONE:
        text_put(t, "done in %.1f ms, %.1f ms ago", flight_ms(r->ended_ns, r->started_ns),
                 flight_ms(now, r->ended_ns));
        break;
    case SHOAL_FLIGHT_FAILED:
        if (r->started_ns)
            text_put(t, "failed (%s) after %.1f ms, %.1f ms ago", shoal_status_string(r->status),
                     flight_ms(r->ended_ns, r->started_ns), flight_ms(now, r->ended_ns));
        else
            text_put(t, "failed (%s) while queued for %.1f ms, %.1f ms ago",
                     shoal_status_string(r->status), flight_ms(r->ended_ns, r->queued_ns),
                     flight_ms(now, r->ended_ns));
        break;
    }
}

/* The used slots in f->order, oldest first; returns how many. */
static size_t flight_sort(shoal_flight_t *f)
{
    size_t k = 0;
    for (size_t i = 0; i < f->depth; i++) {
        if (f->recs[i].id == 0)
            continue;
        size_t j = k++;
        while (j > 0 && f->recs[f->order[j - 1]].id > f->recs[i].id) {
            f->order[j] = f->order[j - 1];
            j--;
        }
        f->order[j] = i;
    }
    return k;
}

size_t shoal_flight_format(shoal_flight_t *f, char *buf, size_t cap)
{
    if (cap > 0)
        buf[0] = '\0';
    if (!f)
        return 0;
    flight_text_t t = {.buf = buf, .cap = cap, .len = 0};
    pthread_mutex_lock(&f->lock);
    uint64_t now = shoal_coarse_now_ns();
    size_t k = flight_sort(f);
    for (size_t i = 0; i < k; i++) {
        flight_put_rec(f, &f->recs[f->order[i]], now, &t);
        text_put(&t, "\n");
    }
    pthread_mutex_unlock(&f->lock);
    return t.len;
}

void shoal_flight_dump(shoal_flight_t *f, const char *reason)
{
    if (!f || shoal_log_level < SHOAL_LOG_ERROR || !(shoal_log_subsys & SHOAL_SUBSYS(INIT)))
        return;
    pthread_mutex_lock(&f->lock);
    uint64_t now = shoal_coarse_now_ns();
    size_t k = flight_sort(f);
    shoal_error(INIT, "rank %d flight recorder (%s): last %zu of %llu operations", f->rank,
                reason ? reason : "dump", k, (unsigned long long)f->nqueued);
    for (size_t i = 0; i < k; i++) {
        char line[1024];
        flight_text_t t = {.buf = line, .cap = sizeof(line), .len = 0};
        line[0] = '\0';
        flight_put_rec(f, &f->recs[f->order[i]], now, &t);
        shoal_error(INIT, "rank %d %s", f->rank, line);
    }
    pthread_mutex_unlock(&f->lock);
}
