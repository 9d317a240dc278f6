/* Failures that involve other ranks (fault.h): causes, mismatches, and the
 * watch on the bootstrap star that carries failure notices between ranks. */
#include "fault.h"

#include "base/clock.h"
#include "base/log.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* How often a waiting executor polls the bootstrap: a system call per
 * poll, so not on every spin, yet soon enough that a rank stuck waiting
 * for a dead or failed peer hears of it within a fraction of a second. */
#define SHOAL_WATCH_INTERVAL_NS 200000ull

/* How long a rank that lost a connection waits for the news that explains
 * it: the peer's death (seen by rank 0 at the same moment) or the failure
 * it reported before it left. */
#define SHOAL_EXPLAIN_NS 200000000ull

static void fault_vcause(struct shoal_comm *comm, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&comm->watch_lock);
    if (!comm->cause[0]) {
        vsnprintf(comm->cause, sizeof(comm->cause), fmt, ap);
        shoal_debug(INIT, "rank %d: %s", comm->team.rank, comm->cause);
    }
    pthread_mutex_unlock(&comm->watch_lock);
}

void shoal_fault_cause(struct shoal_comm *comm, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fault_vcause(comm, fmt, ap);
    va_end(ap);
}

void shoal_fault_reset(struct shoal_comm *comm)
{
    pthread_mutex_lock(&comm->watch_lock);
    /* A broken communicator keeps the reason it broke. */
    if (atomic_load_explicit(&comm->error, memory_order_acquire) == SHOAL_OK)
        comm->cause[0] = '\0';
    pthread_mutex_unlock(&comm->watch_lock);
}

shoal_status_t shoal_fault_mismatch(struct shoal_comm *comm, int peer, const shoal_sig_t *sig)
{
    char mine[SHOAL_SIG_STR_MAX], theirs[SHOAL_SIG_STR_MAX];
    shoal_fault_cause(comm, "rank %d runs %s, but rank %d sent data of %s", comm->team.rank,
                      shoal_sig_format(&comm->sig, mine, sizeof(mine)), peer,
                      shoal_sig_format(sig, theirs, sizeof(theirs)));
    return SHOAL_ERR_MISMATCH;
}

shoal_status_t shoal_fault_watch(struct shoal_comm *comm, int force)
{
    if (comm->team.nranks == 1 || !comm->bootstrap)
        return SHOAL_OK;
    if (pthread_mutex_trylock(&comm->watch_lock) != 0)
        return SHOAL_OK; /* another thread is looking */
    shoal_status_t s = SHOAL_OK;
    uint64_t now = shoal_now_ns();
    if (comm->news) {
        s = (shoal_status_t)atomic_load_explicit(&comm->error, memory_order_acquire);
        goto out;
    }
    if (!force && now < comm->watch_next_ns)
        goto out;
    comm->watch_next_ns = now + SHOAL_WATCH_INTERVAL_NS;
    int culprit = -1;
    char text[SHOAL_ERROR_MAX];
    s = shoal_bootstrap_poll(comm->bootstrap, &culprit, text, sizeof(text));
    if (s == SHOAL_OK)
        goto out;
    comm->news = 1;
    if (!comm->cause[0])
        snprintf(comm->cause, sizeof(comm->cause), "%s", text);
    shoal_error(INIT, "rank %d: %s (%s)", comm->team.rank, text, shoal_status_string(s));
    int ok = SHOAL_OK;
    atomic_compare_exchange_strong_explicit(&comm->error, &ok, (int)s, memory_order_acq_rel,
                                            memory_order_acquire);
out:
    pthread_mutex_unlock(&comm->watch_lock);
    return s;
}

shoal_status_t shoal_fault_explain(struct shoal_comm *comm, shoal_status_t status)
{
    if (status != SHOAL_ERR_PEER || comm->team.nranks == 1 || !comm->bootstrap)
        return status;
    uint64_t until = shoal_now_ns() + SHOAL_EXPLAIN_NS;
    do {
        shoal_status_t news = shoal_fault_watch(comm, 1);
        if (news != SHOAL_OK)
            return news;
        sched_yield();
    } while (shoal_now_ns() < until);
    shoal_fault_cause(comm, "a connection of rank %d to another rank broke (the log names "
                      "the rank)", comm->team.rank);
    return status;
}

void shoal_fault_report(struct shoal_comm *comm, shoal_status_t status)
{
    if (status == SHOAL_ERR_ABORTED || comm->team.nranks == 1 || !comm->bootstrap)
        return;
    /* Room for the prefix: a cut cause still names what matters first. */
    char text[SHOAL_ERROR_MAX + 32];
    pthread_mutex_lock(&comm->watch_lock);
    int news = comm->news;
    snprintf(text, sizeof(text), "rank %d reports: %s", comm->team.rank,
             comm->cause[0] ? comm->cause : shoal_status_string(status));
    pthread_mutex_unlock(&comm->watch_lock);
    if (!news)
        shoal_bootstrap_report(comm->bootstrap, -1, status, text);
}
