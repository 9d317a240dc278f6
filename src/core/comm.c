/* Communicator lifecycle: init from an id, destroy, abort, queries,
 * and the per-communicator error record. Split is in split.c, shrink in
 * shrink.c, memory registration in reg.c. */
#include "comm.h"
#include "dev_stage.h"

#include "algos/algo.h"
#include "exec.h"
#include "fault.h"
#include "flight.h"
#include "handle.h"
#include "link_probe.h"
#include "reg.h"
#include "rma.h"
#include "wireup.h"

#include "bootstrap.h"
#include "base/cancel.h"
#include "base/clock.h"
#include "base/dev.h"
#include "base/log.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Communicator handles. A communicator lives in a shell of comm_pool
 * (core/handle.h), whose memory is never given back, so an API call checks
 * its handle by reading the handle's magic rather than by looking it up in
 * a table under a process-wide lock, which every call on every
 * communicator would take.
 *
 * A communicator whose address was reused: shoal_comm_reenter must refuse a
 * communicator that was freed while its caller was away, even when a new
 * one has been made at the same address since. With the table gone, the
 * shell's serial says which communicator lives in it: it is set, from a
 * process-wide counter, each time a communicator is made in the shell, and
 * reenter compares it with the one its caller saved. Keeping a table only
 * for reenter would bring the lock back on the path of every init and
 * destroy for the sake of a rare call; the shells make it unnecessary. */
static shoal_handle_pool_t comm_pool = SHOAL_HANDLE_POOL_INIT(struct shoal_comm, "communicator");
static _Atomic uint64_t comm_serials;

/* The handle fields that a new communicator in a reused shell keeps
 * (comm.h): magic, serial, active and orphan, together. */
_Static_assert(offsetof(struct shoal_comm, serial) == offsetof(struct shoal_comm, magic) + 8 &&
                   offsetof(struct shoal_comm, active) ==
                       offsetof(struct shoal_comm, serial) + 8 &&
                   offsetof(struct shoal_comm, orphan) ==
                       offsetof(struct shoal_comm, active) + sizeof(atomic_int),
               "magic, serial, active and orphan must stay together in struct shoal_comm");

/* A shell for a new communicator, every field reset but the handle's: a
 * stale handle's call may be reading magic and serial, counting itself in
 * active and reading orphan as it leaves at this moment, and it backs off
 * when it sees magic (0 until comm_publish), touching nothing else. The
 * shell's last communicator left orphan 0 or 2: a stale leaver frees
 * nothing either way. */
static struct shoal_comm *comm_shell_new(void)
{
    struct shoal_comm *comm = shoal_handle_alloc(&comm_pool);
    if (!comm)
        return NULL;
    memset(comm, 0, offsetof(struct shoal_comm, magic));
    size_t tail = offsetof(struct shoal_comm, orphan) + sizeof(comm->orphan);
    memset((char *)comm + tail, 0, sizeof(*comm) - tail);
    atomic_store(&comm->orphan, 0);
    return comm;
}

/* Let API calls in: a serial of its own first, then the magic that makes
 * it valid (seq_cst, as the stores of abort and destroy). */
static void comm_publish(struct shoal_comm *comm)
{
    atomic_store(&comm->serial, atomic_fetch_add(&comm_serials, 1) + 1);
    atomic_store(&comm->magic, SHOAL_COMM_LIVE);
}

/* Take comm from a live state to what (0 or SHOAL_COMM_ABORTING); 0 when
 * another thread did first or comm is not a live communicator. */
static int comm_unpublish(struct shoal_comm *comm, uint64_t what)
{
    uint64_t live = SHOAL_COMM_LIVE;
    return comm && shoal_handle_owns(&comm_pool, comm) &&
           atomic_compare_exchange_strong(&comm->magic, &live, what);
}

/* Yields before the wait for calls to leave starts to sleep, and the
 * length of its sleeps: a call that polls the abort flag leaves within
 * microseconds, one in a socket wait within a cancellation slice. */
#define COMM_WAIT_SPINS 64
#define COMM_WAIT_NAP_NS 200000L

shoal_status_t shoal_comm_wait_calls(struct shoal_comm *comm, int keep, const char *what)
{
    uint64_t deadline = shoal_deadline_after(comm->team.timeout_ns);
    for (unsigned spins = 0; atomic_load(&comm->active) > keep; spins++) {
        if (shoal_deadline_passed(deadline)) {
            int left = atomic_load(&comm->active) - keep;
            if (left <= 0)
                break;
            shoal_error(INIT, "rank %d: %s: %d call(s) on the communicator on other threads "
                        "did not return within SHOAL_TIMEOUT (%.1f s) of being aborted; "
                        "gave up waiting for them", comm->team.rank, what, left,
                        (double)comm->team.timeout_ns * 1e-9);
            return SHOAL_ERR_TIMEOUT;
        }
        if (spins < COMM_WAIT_SPINS) {
            sched_yield();
        } else {
            struct timespec nap = {0, COMM_WAIT_NAP_NS};
            nanosleep(&nap, NULL);
        }
    }
    return SHOAL_OK;
}

static void comm_free(struct shoal_comm *comm);

/* Take the freeing of an orphaned comm (1 -> 2); 1 if this caller won. */
static int comm_claim(struct shoal_comm *comm)
{
    int handed = 1;
    return atomic_compare_exchange_strong(&comm->orphan, &handed, 2);
}

/* An abort or destroy gave up waiting for the calls in comm (its magic
 * already cleared or ABORTING, so no new call stays): the last to leave
 * frees comm, or this thread does if they all left meanwhile. The store
 * and the load are seq_cst, as are the leaver's decrement and load
 * (shoal_comm_leave): one side sees the other, and the exchange makes
 * sure only one frees. */
static void comm_orphan(struct shoal_comm *comm)
{
    atomic_store(&comm->orphan, 1);
    if (atomic_load(&comm->active) == 0 && comm_claim(comm))
        comm_free(comm);
}

static _Thread_local char thread_error[SHOAL_ERROR_MAX];

int shoal_comm_valid(const struct shoal_comm *comm)
{
    return shoal_handle_owns(&comm_pool, comm) &&
           atomic_load_explicit(&((struct shoal_comm *)comm)->magic, memory_order_acquire) ==
               SHOAL_COMM_LIVE;
}

static shoal_status_t record_error(char *buf, shoal_status_t status, const char *fmt,
                                   va_list ap)
{
    vsnprintf(buf, SHOAL_ERROR_MAX, fmt, ap);
    shoal_error(INIT, "%s (%s)", buf, shoal_status_string(status));
    return status;
}

/* The progress thread and the caller may both record a failure on one
 * communicator; failures are rare, so one lock serves all. */
static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;

shoal_status_t shoal_comm_fail(struct shoal_comm *comm, shoal_status_t status,
                               const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (comm) {
        pthread_mutex_lock(&error_lock);
        record_error(comm->last_error, status, fmt, ap);
        pthread_mutex_unlock(&error_lock);
    } else {
        record_error(thread_error, status, fmt, ap);
    }
    va_end(ap);
    return status;
}

static shoal_status_t thread_fail(shoal_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static shoal_status_t thread_fail(shoal_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record_error(thread_error, status, fmt, ap);
    va_end(ap);
    return status;
}

shoal_status_t shoal_comm_set_error(struct shoal_comm *comm, shoal_status_t status)
{
    if (status == SHOAL_ERR_PEER || status == SHOAL_ERR_TIMEOUT ||
        status == SHOAL_ERR_ABORTED) {
        int expected = SHOAL_OK;
        atomic_compare_exchange_strong_explicit(&comm->error, &expected, (int)status,
                                                memory_order_acq_rel, memory_order_acquire);
    }
    return status;
}

/* Count a call in flight in comm, then read its magic (and serial, when
 * not 0): the count comes first, so that an abort or destroy, which clears
 * the magic and then waits for the count to drop, either is seen by this
 * call or sees it (both sides seq_cst). Returns the magic the call saw,
 * SHOAL_COMM_LIVE or SHOAL_COMM_ABORTING, with the call counted; 0, not
 * counted, if comm is not a communicator's shell, not live, or another
 * serial's. Nothing of comm but its handle fields is read. */
static uint64_t comm_try_enter(struct shoal_comm *comm, uint64_t serial)
{
    if (!shoal_handle_owns(&comm_pool, comm))
        return 0;
    atomic_fetch_add(&comm->active, 1);
    uint64_t magic = atomic_load(&comm->magic);
    if ((magic == SHOAL_COMM_LIVE || magic == SHOAL_COMM_ABORTING) &&
        (!serial || atomic_load(&comm->serial) == serial))
        return magic;
    /* Through leave: this may be the last count of an orphaned comm. */
    shoal_comm_leave(comm);
    return 0;
}

void shoal_comm_leave(struct shoal_comm *comm)
{
    if (atomic_fetch_sub(&comm->active, 1) == 1 && atomic_load(&comm->orphan) == 1 &&
        comm_claim(comm))
        comm_free(comm);
}

/* The refusal of a call on a broken communicator, with the reason it broke. */
static shoal_status_t comm_broken(struct shoal_comm *comm, const char *caller,
                                  shoal_status_t err)
{
    char cause[SHOAL_ERROR_MAX];
    pthread_mutex_lock(&comm->watch_lock);
    snprintf(cause, sizeof(cause), "%s", comm->cause[0] ? comm->cause
                                                        : shoal_status_string(err));
    pthread_mutex_unlock(&comm->watch_lock);
    return shoal_comm_fail(comm, err, "%s: communicator is broken by an earlier failure: %s",
                           caller, cause);
}

shoal_status_t shoal_comm_enter(struct shoal_comm *comm, const char *caller)
{
    if (!comm)
        return thread_fail(SHOAL_ERR_INVALID_ARG, "%s: communicator is NULL", caller);
    uint64_t magic = comm_try_enter(comm, 0);
    if (!magic)
        return thread_fail(SHOAL_ERR_INVALID_ARG,
                           "%s: communicator %p is not valid (destroyed or never created)",
                           caller, (void *)comm);
    shoal_status_t s = SHOAL_OK;
    int err = atomic_load_explicit(&comm->error, memory_order_acquire);
    if (magic == SHOAL_COMM_ABORTING) {
        /* The call met an abort under way, which waits for it: it is
         * refused as a call that got in just before would be, with the
         * reason kept for this thread, as comm is about to go. */
        s = thread_fail(SHOAL_ERR_ABORTED, "%s: communicator was aborted", caller);
    } else if (atomic_load_explicit(&comm->team.aborted, memory_order_acquire)) {
        s = shoal_comm_fail(comm, SHOAL_ERR_ABORTED, "%s: communicator was aborted", caller);
    } else if (err != SHOAL_OK) {
        s = comm_broken(comm, caller, (shoal_status_t)err);
    }
    if (s != SHOAL_OK)
        shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_comm_enter_any(struct shoal_comm *comm, const char *caller)
{
    if (!comm)
        return thread_fail(SHOAL_ERR_INVALID_ARG, "%s: communicator is NULL", caller);
    uint64_t magic = comm_try_enter(comm, 0);
    if (magic == SHOAL_COMM_ABORTING)
        shoal_comm_leave(comm);
    if (magic != SHOAL_COMM_LIVE)
        return thread_fail(SHOAL_ERR_INVALID_ARG,
                           "%s: communicator %p is not valid (destroyed, aborted or never "
                           "created)", caller, (void *)comm);
    return SHOAL_OK;
}

int shoal_comm_reenter(struct shoal_comm *comm, uint64_t serial)
{
    /* A serial is never 0, so a comm of any serial is not accepted. */
    uint64_t magic = serial ? comm_try_enter(comm, serial) : 0;
    if (magic == SHOAL_COMM_ABORTING)
        shoal_comm_leave(comm);
    return magic == SHOAL_COMM_LIVE;
}

const char *shoal_comm_last_error(shoal_comm_t comm)
{
    return shoal_comm_valid(comm) ? comm->last_error : thread_error;
}

shoal_status_t shoal_get_unique_id(shoal_unique_id_t *id_p)
{
    if (!id_p)
        return thread_fail(SHOAL_ERR_INVALID_ARG, "shoal_get_unique_id: id_p is NULL");
    shoal_config_get();
    return shoal_bootstrap_id_create(id_p);
}

/* What every rank tells the others at init: its host identity, its place
 * on the host and the address of its rendezvous listener (shrink). */
typedef struct {
    char host_id[SHOAL_HOST_ID_MAX];
    uint8_t rdv_addr[SHOAL_BOOT_ADDR_BYTES];
    uint32_t pid;
    uint8_t tag[SHOAL_TAG_BYTES];
    shoal_place_t place;
} comm_card_t;

/* Exchange host identities and rendezvous addresses in one all-gather, and
 * number the distinct hosts in rank order. */
static shoal_status_t comm_exchange_cards(struct shoal_comm *comm)
{
    int n = comm->team.nranks;
    comm->host_ids = calloc((size_t)n, sizeof(*comm->host_ids));
    comm->host_of = calloc((size_t)n, sizeof(*comm->host_of));
    comm->rdv_addrs = calloc((size_t)n, sizeof(*comm->rdv_addrs));
    comm->pids = calloc((size_t)n, sizeof(*comm->pids));
    comm->tags = calloc((size_t)n, sizeof(*comm->tags));
    comm_card_t *cards = calloc((size_t)n, sizeof(*cards));
    shoal_status_t s = SHOAL_ERR_NO_MEMORY;
    if (!comm->host_ids || !comm->host_of || !comm->rdv_addrs || !comm->pids || !comm->tags ||
        !cards)
        goto out_free_cards;
    shoal_host_id(cards[comm->team.rank].host_id);
    shoal_place_self(&cards[comm->team.rank].place);
    cards[comm->team.rank].pid = (uint32_t)getpid();
    s = shoal_auth_random(cards[comm->team.rank].tag, SHOAL_TAG_BYTES);
    if (s != SHOAL_OK)
        goto out_free_cards;
    s = shoal_shrink_listen(comm, cards[comm->team.rank].rdv_addr);
    if (s != SHOAL_OK)
        goto out_free_cards;
    s = shoal_bootstrap_allgather(comm->bootstrap, cards, sizeof(*cards));
    if (s != SHOAL_OK)
        goto out_free_cards;
    for (int r = 0; r < n && s == SHOAL_OK; r++) {
        memcpy(comm->host_ids[r], cards[r].host_id, SHOAL_HOST_ID_MAX);
        comm->pids[r] = cards[r].pid;
        memcpy(comm->tags[r], cards[r].tag, SHOAL_TAG_BYTES);
        s = shoal_bootstrap_addr_unpack(cards[r].rdv_addr, &comm->rdv_addrs[r]);
    }
    if (s != SHOAL_OK) {
        shoal_error(INIT, "rank %d: malformed rendezvous address in the init exchange",
                    comm->team.rank);
        s = SHOAL_ERR_INTERNAL;
        goto out_free_cards;
    }
    comm->team.nhosts = 0;
    for (int r = 0; r < n; r++) {
        comm->host_ids[r][SHOAL_HOST_ID_MAX - 1] = '\0';
        int h = 0;
        while (h < r && strcmp(comm->host_ids[h], comm->host_ids[r]))
            h++;
        comm->host_of[r] = h < r ? comm->host_of[h] : comm->team.nhosts++;
    }
    shoal_place_t *places = malloc((size_t)n * sizeof(*places));
    if (!places) {
        s = SHOAL_ERR_NO_MEMORY;
        goto out_free_cards;
    }
    for (int r = 0; r < n; r++)
        places[r] = cards[r].place;
    s = shoal_cluster_build(&comm->team.cluster, n, comm->host_of, comm->team.nhosts, places);
    free(places);
out_free_cards:
    free(cards);
    return s;
}

/* SHOAL_CPU_BIND, for a rank alone in its process: several ranks of one
 * process (threads, or the NCCL door's one-process communicators) would
 * all be bound where the first one goes. */
static void comm_bind(struct shoal_comm *comm)
{
    const shoal_cluster_t *c = &comm->team.cluster;
    int me = comm->team.rank, h = comm->host_of[me];
    for (int j = 0; j < shoal_cluster_nlocal(c, h); j++) {
        int r = shoal_cluster_rank_at(c, h, j);
        if (r != me && comm->pids[r] == comm->pids[me])
            return;
    }
    comm->bound = shoal_place_bind(me, c->local_of[me], shoal_cluster_nlocal(c, h));
}

static void comm_free(struct shoal_comm *comm)
{
    shoal_exec_destroy(comm, 0);
    shoal_dev_comm_destroy(comm);
    /* Before the endpoints it reads go. */
    shoal_flight_destroy(comm->flight);
    comm->flight = NULL;
    shoal_transport_teardown(comm);
    free(comm->premul);
    shoal_rma_destroy(comm);
    shoal_reg_release_all(comm);
    if (comm->rdv_fd >= 0)
        close(comm->rdv_fd);
    free(comm->rdv_addrs);
    if (comm->bootstrap)
        shoal_bootstrap_destroy(comm->bootstrap);
    free(comm->team.eps);
    free(comm->team.waited_ns);
    free(comm->host_ids);
    free(comm->rdma_devs);
    shoal_cluster_free(&comm->team.cluster);
    if (comm->bound)
        shoal_place_unbind();
    free(comm->host_of);
    free(comm->pids);
    free(comm->tags);
    pthread_mutex_destroy(&comm->watch_lock);
    /* Stale handles read the magic: it says "not a communicator" before the
     * shell can hold another. */
    atomic_store(&comm->magic, 0);
    shoal_handle_free(&comm_pool, comm);
}

shoal_status_t shoal_comm_init(int nranks, const shoal_unique_id_t *id, int rank,
                               shoal_comm_t *comm_p)
{
    const shoal_config_t *cfg = shoal_config_get();
    if (!id || !comm_p)
        return thread_fail(SHOAL_ERR_INVALID_ARG, "shoal_comm_init: %s is NULL",
                           id ? "comm_p" : "id");
    if (nranks < 1)
        return thread_fail(SHOAL_ERR_INVALID_ARG, "shoal_comm_init: nranks %d < 1", nranks);
    if (rank < 0 || rank >= nranks)
        return thread_fail(SHOAL_ERR_INVALID_ARG,
                           "shoal_comm_init: rank %d out of range 0..%d", rank, nranks - 1);
    if (shoal_algo_check_setting() != SHOAL_OK)
        return thread_fail(SHOAL_ERR_INVALID_ARG, "shoal_comm_init: SHOAL_ALGO=%s is not valid",
                           cfg->algo.algo);

    struct shoal_comm *comm = comm_shell_new();
    if (!comm)
        return thread_fail(SHOAL_ERR_NO_MEMORY, "shoal_comm_init: out of memory");
    shoal_log_clear_error();
    comm->team.rank = rank;
    comm->team.nranks = nranks;
    comm->team.kern = &shoal_host_kernels;
    shoal_copier_init(&comm->team.copy_move, (shoal_copy_kind_t)cfg->algo.copy,
                      "copies into slots", rank);
    shoal_copier_init(&comm->team.copy_out, (shoal_copy_kind_t)cfg->algo.copy,
                      "copies into the output", rank);
    comm->team.hooks = &shoal_comm_team_hooks;
    comm->rdv_fd = -1;
    pthread_mutex_init(&comm->watch_lock, NULL);
    comm->team.timeout_ns = cfg->core.timeout_ns;
    comm->team.eps = calloc((size_t)nranks, sizeof(*comm->team.eps));
    comm->team.waited_ns = calloc(2 * (size_t)nranks + 1, sizeof(*comm->team.waited_ns));
    shoal_status_t s = comm->team.eps && comm->team.waited_ns ? SHOAL_OK : SHOAL_ERR_NO_MEMORY;
    if (s != SHOAL_OK)
        goto err_free;

    /* Tests only: late joiners keep rank 0's bootstrap listener served. */
    shoal_wireup_test_delay(rank > 0);
    /* A split's init stops at the parent's abort (shoal_cancel_push in
     * shoal_comm_split): the socket waits see it within a slice, and the
     * steps between them look here. */
    s = shoal_bootstrap_init(id, rank, nranks, comm->team.timeout_ns, &comm->bootstrap);
    if (s == SHOAL_OK && shoal_cancelled())
        s = SHOAL_ERR_ABORTED;
    if (s != SHOAL_OK)
        goto err_free;
    s = comm_exchange_cards(comm);
    if (s == SHOAL_OK && shoal_cancelled())
        s = SHOAL_ERR_ABORTED;
    if (s != SHOAL_OK)
        goto err_free;
    /* Before wireup, whose probes should see the ranks where they run. */
    comm_bind(comm);
    comm->team.chunk_size = shoal_config_chunk(cfg, comm->team.nhosts > 1 || !cfg->shm.enable);
    comm->stream_min = shoal_config_stream_min(
        cfg, shoal_cluster_nlocal(&comm->team.cluster, comm->host_of[comm->team.rank]));
    s = shoal_transport_wireup(comm);
    if (s == SHOAL_OK)
        s = shoal_flight_create(comm, (size_t)cfg->core.flight_depth, &comm->flight);
    if (s == SHOAL_OK)
        s = shoal_links_setup(comm);
    if (s == SHOAL_OK && shoal_cancelled())
        s = SHOAL_ERR_ABORTED;
    if (s != SHOAL_OK)
        goto err_free;
    s = shoal_rma_create(comm);
    if (s == SHOAL_OK)
        s = shoal_exec_create(comm);
    if (s != SHOAL_OK)
        goto err_free;
    comm_publish(comm);
    /* A process that already uses CUDA gets shoal's kernels loaded into
     * its current context now, before any stream-ordered call
     * (dev_ops.h's prepare); one that does not is not made to load it. */
    const shoal_dev_ops_t *dev = shoal_dev_if_driver();
    if (dev)
        dev->prepare();
    shoal_info(INIT, "rank %d/%d ready: %d host(s), chunk %zu B", rank, nranks,
               comm->team.nhosts, comm->team.chunk_size);
    *comm_p = comm;
    return SHOAL_OK;

err_free:
    /* The reason is the last error logged on the way (logged or not). */
    if (s == SHOAL_ERR_ABORTED && shoal_cancelled())
        thread_fail(s, "shoal_comm_init: rank %d of %d: cut short, as the communicator it "
                    "was split from was aborted", rank, nranks);
    else
        thread_fail(s, "shoal_comm_init: rank %d of %d could not form the communicator: %s",
                    rank, nranks,
                    shoal_log_last_error()[0] ? shoal_log_last_error() : "no reason logged");
    comm_free(comm);
    return s;
}

/* wait_peers: a barrier after the queue drained, so that every rank has
 * finished reading what this rank sent before its sockets close. The
 * operations flush their sends before they complete, so the barrier is a
 * margin rather than a need, and the NCCL door goes without it: there one
 * thread may destroy several ranks of one communicator in turn. */
static shoal_status_t comm_destroy(shoal_comm_t comm, int wait_peers)
{
    if (!comm || !shoal_comm_valid(comm))
        return thread_fail(SHOAL_ERR_INVALID_ARG,
                           "shoal_comm_destroy: communicator %p is not valid", (void *)comm);
    /* Operations still queued run first. A broken communicator skips the
     * barrier (use abort then). */
    shoal_status_t s = shoal_exec_destroy(comm, 1);
    if (wait_peers && s == SHOAL_OK && !atomic_load(&comm->team.aborted) &&
        atomic_load(&comm->error) == SHOAL_OK)
        s = shoal_bootstrap_barrier(comm->bootstrap);
    if (!comm_unpublish(comm, 0))
        return thread_fail(SHOAL_ERR_INVALID_ARG,
                           "shoal_comm_destroy: communicator %p destroyed twice", (void *)comm);
    /* Calls racing destroy (a misuse) were counted before the magic was
     * cleared; they are waited for, as long as the deadline allows. */
    if (shoal_comm_wait_calls(comm, 0, "shoal_comm_destroy") != SHOAL_OK) {
        comm_orphan(comm);
        return thread_fail(SHOAL_ERR_TIMEOUT, "shoal_comm_destroy: calls on other threads "
                           "are still inside the communicator; the last of them frees it");
    }
    comm_free(comm);
    if (s != SHOAL_OK)
        thread_fail(s, "shoal_comm_destroy: %s",
                    shoal_status_string(s));
    return s;
}

shoal_status_t shoal_comm_destroy(shoal_comm_t comm)
{
    return comm_destroy(comm, 1);
}

shoal_status_t shoal_comm_release(shoal_comm_t comm)
{
    return comm_destroy(comm, 0);
}

shoal_status_t shoal_comm_abort(shoal_comm_t comm)
{
    if (!comm_unpublish(comm, SHOAL_COMM_ABORTING))
        return thread_fail(SHOAL_ERR_INVALID_ARG,
                           "shoal_comm_abort: communicator %p is not valid", (void *)comm);
    atomic_store_explicit(&comm->team.aborted, 1, memory_order_release);
    shoal_bootstrap_abort(comm->bootstrap);
    /* Calls in flight on other threads see the flag at their next poll (a
     * split's init too: base/cancel.h), their bootstrap socket shut down,
     * or their queued task failed by shoal_exec_stop, and return
     * SHOAL_ERR_ABORTED; the wait for them to leave is bounded by comm's
     * deadline all the same. Only then is the queue torn down. */
    shoal_exec_stop(comm);
    if (shoal_comm_wait_calls(comm, 0, "shoal_comm_abort") != SHOAL_OK) {
        /* Freeing comm under them would be worse than letting the last of
         * them free it: comm is aborted and refuses every new call. */
        comm_orphan(comm);
        return thread_fail(SHOAL_ERR_TIMEOUT, "shoal_comm_abort: calls on other threads "
                           "are still inside the communicator; it is aborted, and the last "
                           "of them frees it");
    }
    shoal_exec_destroy(comm, 0);
    comm_free(comm);
    return SHOAL_OK;
}

shoal_status_t shoal_comm_get_async_error(shoal_comm_t comm, shoal_status_t *status_p)
{
    static const char what[] = "shoal_comm_get_async_error";
    if (!status_p)
        return thread_fail(SHOAL_ERR_INVALID_ARG, "%s: status_p is NULL", what);
    shoal_status_t s = shoal_comm_enter_any(comm, what);
    if (s != SHOAL_OK)
        return s;
    shoal_fault_watch(comm, 0);
    shoal_status_t err = (shoal_status_t)atomic_load_explicit(&comm->error, memory_order_acquire);
    if (atomic_load_explicit(&comm->team.aborted, memory_order_acquire))
        err = SHOAL_ERR_ABORTED;
    if (err != SHOAL_OK) {
        /* Recorded, not logged: callers poll this, and the failure was
         * logged where it was found. */
        pthread_mutex_lock(&comm->watch_lock);
        pthread_mutex_lock(&error_lock);
        snprintf(comm->last_error, sizeof(comm->last_error), "%s: %.480s", what,
                 comm->cause[0] ? comm->cause : shoal_status_string(err));
        pthread_mutex_unlock(&error_lock);
        pthread_mutex_unlock(&comm->watch_lock);
    }
    shoal_comm_leave(comm);
    *status_p = err;
    return SHOAL_OK;
}

shoal_status_t shoal_comm_set_progress(shoal_comm_t comm, shoal_progress_t mode)
{
    static const char what[] = "shoal_comm_set_progress";
    shoal_status_t s = shoal_comm_enter_any(comm, what);
    if (s != SHOAL_OK)
        return s;
    if (mode != SHOAL_PROGRESS_THREAD && mode != SHOAL_PROGRESS_CALLER)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: mode %d is neither "
                            "SHOAL_PROGRESS_THREAD nor SHOAL_PROGRESS_CALLER", what, (int)mode);
    else if (shoal_exec_set_threaded(comm, mode == SHOAL_PROGRESS_THREAD) != 0)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: rank %d: the communicator's "
                            "progress thread runs already (since its first non-blocking or "
                            "stream-ordered call), or an operation is in flight; set its "
                            "progress before that", what, comm->team.rank);
    shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_comm_rank(shoal_comm_t comm, int *rank_p)
{
    if (!shoal_comm_valid(comm) || !rank_p)
        return thread_fail(SHOAL_ERR_INVALID_ARG, "shoal_comm_rank: %s",
                           rank_p ? "invalid communicator" : "rank_p is NULL");
    *rank_p = comm->team.rank;
    return SHOAL_OK;
}

shoal_status_t shoal_comm_size(shoal_comm_t comm, int *size_p)
{
    if (!shoal_comm_valid(comm) || !size_p)
        return thread_fail(SHOAL_ERR_INVALID_ARG, "shoal_comm_size: %s",
                           size_p ? "invalid communicator" : "size_p is NULL");
    *size_p = comm->team.nranks;
    return SHOAL_OK;
}
