/* The flight recorder (flight.h). Records live in slots that their writers
 * publish whole, as a sequence-numbered copy (a seqlock): a writer makes
 * the sequence odd, stores the record's words and makes it even again, and
 * a reader retries a copy that saw the sequence odd or changed. Writers
 * never wait and never take a lock; the ones that could meet on a slot are
 * kept apart by who calls what (flight.h): queue only fills a free or
 * finished slot, and start and finish write only their own record. Records
 * are put in order by number only when they are formatted, so replacing
 * the oldest finished record never moves the others. */
#include "flight.h"

#include "base/clock.h"
#include "comm.h"
#include "base/log.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A record as its slot holds it: one word per field, so that a writer
 * stores only the fields it changes. */
enum {
    W_ID,
    W_WHAT,      /* const char * */
    W_ALGO,      /* const char * */
    W_BYTES,
    W_STATE,     /* shoal_flight_state_t | shoal_status_t << 32 */
    W_HAS_SIG,
    W_SIG,       /* a shoal_sig_t, SIG_WORDS words */
    SIG_WORDS = (sizeof(shoal_sig_t) + sizeof(uint64_t) - 1) / sizeof(uint64_t),
    W_QUEUED = W_SIG + SIG_WORDS,
    W_STARTED,
    W_ENDED,
    REC_WORDS
};

typedef struct {
    atomic_uint seq;                 /* odd while its writer is at work */
    _Atomic uint64_t w[REC_WORDS];
} flight_slot_t;

struct shoal_flight {
    pthread_mutex_t lock;       /* format's and dump's scratch below */
    struct shoal_comm *comm;
    int rank;
    int nranks;
    size_t depth;
    /* depth + 1: the last takes an operation that starts without a
     * record of its own (left out while queued). */
    flight_slot_t *slots;
    _Atomic uint64_t nqueued;   /* numbers handed out */
    _Atomic uint64_t running;   /* the record whose base is current; 0: none */
    /* 2 x nranks: tx_bytes, then rx_bytes, at start */
    _Atomic unsigned long long *base;
    flight_rec_t *snap;         /* depth + 1: format's copies */
    size_t *order;              /* depth + 1: format's sorting */
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
    f->slots = calloc(depth + 1, sizeof(*f->slots));
    f->snap = calloc(depth + 1, sizeof(*f->snap));
    f->order = calloc(depth + 1, sizeof(*f->order));
    f->base = calloc(2 * nranks, sizeof(*f->base));
    f->delta = calloc(2 * nranks, sizeof(*f->delta));
    if (!f->slots || !f->snap || !f->order || !f->base || !f->delta)
        goto err_free;
    pthread_mutex_init(&f->lock, NULL);
    f->comm = comm;
    f->rank = comm->team.rank;
    f->nranks = comm->team.nranks;
    f->depth = depth;
    *f_p = f;
    return SHOAL_OK;

err_free:
    free(f->delta);
    free(f->base);
    free(f->order);
    free(f->snap);
    free(f->slots);
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
    free(f->snap);
    free(f->slots);
    free(f);
}

/* Reading: a consistent copy of words [from, from + n) of slot s. A writer
 * is a few stores from done, so the retries are short; one that lost its
 * processor midway gets it back. */
static void slot_get(const flight_slot_t *s, size_t from, size_t n, uint64_t *w)
{
    for (unsigned tries = 1;; tries++) {
        unsigned before = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (!(before & 1)) {
            /* Acquire loads keep the second look at seq after them (and
             * cost nothing more than plain ones on x86). */
            for (size_t i = 0; i < n; i++)
                w[i] = atomic_load_explicit(&s->w[from + i], memory_order_acquire);
            if (atomic_load_explicit(&s->seq, memory_order_relaxed) == before)
                return;
        }
        if (tries % 64 == 0)
            sched_yield();
    }
}

static void slot_read(const flight_slot_t *s, flight_rec_t *r)
{
    uint64_t w[REC_WORDS];
    slot_get(s, 0, REC_WORDS, w);
    *r = (flight_rec_t){
        .id = w[W_ID],
        .what = (const char *)(uintptr_t)w[W_WHAT],
        .algo = (const char *)(uintptr_t)w[W_ALGO],
        .bytes = (size_t)w[W_BYTES],
        .state = (shoal_flight_state_t)(uint32_t)w[W_STATE],
        .status = (shoal_status_t)(int32_t)(w[W_STATE] >> 32),
        .has_sig = (int)w[W_HAS_SIG],
        .queued_ns = w[W_QUEUED],
        .started_ns = w[W_STARTED],
        .ended_ns = w[W_ENDED],
    };
    memcpy(&r->sig, &w[W_SIG], sizeof(r->sig));
}

/* Writing, one writer at a time (see the top): begin, put the words that
 * change, end. */
static unsigned slot_begin(flight_slot_t *s)
{
    unsigned seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
    return seq + 2;
}

/* A release store keeps the odd seq before it: a reader that sees the
 * word sees the write under way. */
static void slot_put(flight_slot_t *s, size_t k, uint64_t v)
{
    atomic_store_explicit(&s->w[k], v, memory_order_release);
}

static void slot_end(flight_slot_t *s, unsigned seq)
{
    atomic_store_explicit(&s->seq, seq, memory_order_release);
}

static uint64_t state_word(shoal_flight_state_t state, shoal_status_t status)
{
    return (uint64_t)(uint32_t)state | (uint64_t)(uint32_t)status << 32;
}

static int state_live(uint64_t state_w)
{
    shoal_flight_state_t st = (shoal_flight_state_t)(uint32_t)state_w;
    return st == SHOAL_FLIGHT_QUEUED || st == SHOAL_FLIGHT_RUNNING;
}

/* A slot's number and state words, consistently. */
static void slot_peek(const flight_slot_t *s, uint64_t *id, uint64_t *state_w)
{
    uint64_t w[W_STATE + 1];
    slot_get(s, 0, W_STATE + 1, w);
    *id = w[W_ID];
    *state_w = w[W_STATE];
}

/* Operation id lives in slot id % depth unless that slot was still busy
 * when it was queued (more than depth operations in flight); the slot of
 * id (the spare included), or FLIGHT_NONE, with its state word. */
static size_t flight_find(const shoal_flight_t *f, uint64_t id, uint64_t *state_w)
{
    size_t home = id % f->depth;
    uint64_t got;
    slot_peek(&f->slots[home], &got, state_w);
    if (got == id)
        return home;
    for (size_t i = 0; i <= f->depth; i++) {
        if (i == home)
            continue;
        slot_peek(&f->slots[i], &got, state_w);
        if (got == id)
            return i;
    }
    return FLIGHT_NONE;
}

/* A free slot, else the oldest finished record's; FLIGHT_NONE when every
 * record is queued or running. Never the spare. */
static size_t flight_take(const shoal_flight_t *f)
{
    size_t best = FLIGHT_NONE;
    uint64_t best_id = 0;
    for (size_t i = 0; i < f->depth; i++) {
        uint64_t id, state_w;
        slot_peek(&f->slots[i], &id, &state_w);
        if (id == 0)
            return i;
        if (!state_live(state_w) && (best == FLIGHT_NONE || id < best_id)) {
            best = i;
            best_id = id;
        }
    }
    return best;
}

/* A new record in slot s: every word. */
static void slot_fill(flight_slot_t *s, uint64_t id, const char *what, size_t bytes,
                      uint64_t queued_ns)
{
    unsigned seq = slot_begin(s);
    for (size_t k = 0; k < REC_WORDS; k++)
        slot_put(s, k, 0);
    slot_put(s, W_ID, id);
    slot_put(s, W_WHAT, (uintptr_t)what);
    slot_put(s, W_BYTES, bytes);
    slot_put(s, W_STATE, state_word(SHOAL_FLIGHT_QUEUED, SHOAL_OK));
    slot_put(s, W_QUEUED, queued_ns);
    slot_end(s, seq);
}

uint64_t shoal_flight_queue(shoal_flight_t *f, const char *what, size_t bytes)
{
    if (!f)
        return 0;
    uint64_t now = shoal_coarse_now_ns();
    uint64_t id = atomic_load_explicit(&f->nqueued, memory_order_relaxed) + 1;
    atomic_store_explicit(&f->nqueued, id, memory_order_relaxed);
    size_t i = id % f->depth;
    uint64_t got, state_w;
    slot_peek(&f->slots[i], &got, &state_w);
    if (got && state_live(state_w))
        i = flight_take(f);
    if (i != FLIGHT_NONE)
        slot_fill(&f->slots[i], id, what ? what : "?", bytes, now);
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
    uint64_t state_w;
    size_t i = flight_find(f, id, &state_w);
    if (i == FLIGHT_NONE || !state_live(state_w)) {
        /* Left out while queued: the running operation is the one a stall
         * is found with, so it takes the spare. */
        i = f->depth;
        slot_fill(&f->slots[i], id, NULL, 0, now);
    }
    uint64_t sig_w[SIG_WORDS] = {0};
    if (sig)
        memcpy(sig_w, sig, sizeof(*sig));
    flight_slot_t *s = &f->slots[i];
    unsigned seq = slot_begin(s);
    slot_put(s, W_STATE, state_word(SHOAL_FLIGHT_RUNNING, SHOAL_OK));
    slot_put(s, W_ALGO, (uintptr_t)algo);
    slot_put(s, W_HAS_SIG, sig != NULL);
    for (size_t k = 0; k < SIG_WORDS; k++)
        slot_put(s, W_SIG + k, sig_w[k]);
    slot_put(s, W_STARTED, now);
    slot_end(s, seq);
    int n = f->nranks;
    for (int p = 0; p < n; p++) {
        shoal_ep_t *ep = flight_ep(f, p);
        unsigned long long tx = 0, rx = 0;
        if (ep) {
            tx = atomic_load_explicit(&ep->tx_bytes, memory_order_relaxed);
            rx = atomic_load_explicit(&ep->rx_bytes, memory_order_relaxed);
        }
        atomic_store_explicit(&f->base[p], tx, memory_order_relaxed);
        atomic_store_explicit(&f->base[n + p], rx, memory_order_relaxed);
    }
    atomic_store_explicit(&f->running, id, memory_order_release);
}

void shoal_flight_finish(shoal_flight_t *f, uint64_t id, shoal_status_t status)
{
    if (!f || id == 0)
        return;
    uint64_t now = shoal_coarse_now_ns();
    uint64_t state_w;
    size_t i = flight_find(f, id, &state_w);
    if (i != FLIGHT_NONE && state_live(state_w)) {
        flight_slot_t *s = &f->slots[i];
        unsigned seq = slot_begin(s);
        slot_put(s, W_STATE, state_word(status == SHOAL_OK ? SHOAL_FLIGHT_DONE
                                                           : SHOAL_FLIGHT_FAILED, status));
        slot_put(s, W_ENDED, now);
        slot_end(s, seq);
    }
    if (atomic_load_explicit(&f->running, memory_order_relaxed) == id)
        atomic_store_explicit(&f->running, 0, memory_order_relaxed);
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
        unsigned long long btx = atomic_load_explicit(&f->base[p], memory_order_relaxed);
        unsigned long long brx = atomic_load_explicit(&f->base[n + p], memory_order_relaxed);
        dtx[p] = tx >= btx ? tx - btx : tx;
        drx[p] = rx >= brx ? rx - brx : rx;
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
                           uint64_t running, flight_text_t *t)
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
        if (running == r->id)
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

/* Lock held: copy every slot into f->snap and put the used ones in
 * f->order, oldest first; returns how many. */
static size_t flight_sort(shoal_flight_t *f)
{
    size_t k = 0;
    for (size_t i = 0; i <= f->depth; i++) {
        slot_read(&f->slots[i], &f->snap[i]);
        if (f->snap[i].id == 0)
            continue;
        size_t j = k++;
        while (j > 0 && f->snap[f->order[j - 1]].id > f->snap[i].id) {
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
    uint64_t running = atomic_load_explicit(&f->running, memory_order_acquire);
    size_t k = flight_sort(f);
    for (size_t i = 0; i < k; i++) {
        flight_put_rec(f, &f->snap[f->order[i]], now, running, &t);
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
    uint64_t running = atomic_load_explicit(&f->running, memory_order_acquire);
    size_t k = flight_sort(f);
    shoal_error(INIT, "rank %d flight recorder (%s): last %zu of %llu operations", f->rank,
                reason ? reason : "dump", k,
                (unsigned long long)atomic_load_explicit(&f->nqueued, memory_order_relaxed));
    for (size_t i = 0; i < k; i++) {
        char line[1024];
        flight_text_t t = {.buf = line, .cap = sizeof(line), .len = 0};
        line[0] = '\0';
        flight_put_rec(f, &f->snap[f->order[i]], now, running, &t);
        shoal_error(INIT, "rank %d %s", f->rank, line);
    }
    pthread_mutex_unlock(&f->lock);
}
