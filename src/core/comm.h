/* The communicator object: core's state around the team the algorithms
 * see (algos/team.h). */
#ifndef SHOAL_COMM_H
#define SHOAL_COMM_H

#include "bootstrap.h"
#include "base/config.h"
#include "shoal.h"
#include "sig.h"
#include "algos/team.h"

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define SHOAL_HOST_ID_MAX SHOAL_CONFIG_STR_MAX
#define SHOAL_ERROR_MAX 512
#define SHOAL_TAG_BYTES 16

struct shoal_reg;

struct shoal_comm {
    /* What the algorithms see (algos/team.h): rank, nranks, nhosts,
     * timeout_ns, chunk_size, the cluster view and cost context, the
     * endpoints and transports, the kernels, the running operation's header,
     * streaming flag and byte counters, the abort flag, the selection memo
     * and the cached plans. */
    shoal_team_t team;
    /* An operation whose output on this rank reaches stream_min bytes
     * writes it with streaming stores (team.stream_out set while it runs;
     * see shoal_move_out in algos/prims.h). */
    size_t stream_min;
    shoal_bootstrap_t *bootstrap;

    /* Host identity of every rank, from the bootstrap exchange. */
    char (*host_ids)[SHOAL_HOST_ID_MAX];
    int *host_of;             /* dense host index of each rank */
    /* The RDMA device and port each rank reaches other hosts through
     * ("" where it uses none), from the link setup's exchange; NULL on a
     * communicator of one host. For introspection. */
    char (*rdma_devs)[SHOAL_TL_NIC_MAX];
    /* Every rank's process id (for messages) and a random tag of its own
     * for this communicator, also from the init exchange: transports name
     * what they create in the file system after it, so that the other
     * ranks of the host can find and remove it should the rank die before
     * its wireup finished. */
    uint32_t *pids;
    uint8_t (*tags)[SHOAL_TAG_BYTES];
    int bound; /* holds shoal's CPU binding of this process (shoal_place_bind) */

    /* Pre-multiplied sums: op SHOAL_OP_COUNT + i is premul[i] while used. */
    struct shoal_premul *premul;
    int npremul;

    struct shoal_exec *exec;  /* operation queue and progress thread (exec.h) */
    struct shoal_dev_comm *dev; /* staging of stream-ordered calls (dev_stage.h) */

    /* Shrink (shrink.c): this rank's rendezvous listener, open for the
     * communicator's life, and every rank's address of it, from the init
     * exchange. A shrink's lowest surviving rank accepts the others on its
     * listener, so the new communicator forms without the parent's
     * bootstrap star or data transports. nshrinks numbers the shrinks of
     * comm, the same on every rank that took part in all of them. */
    int rdv_fd;
    shoal_sockaddr_t *rdv_addrs;
    uint32_t nshrinks;
    /* Grows of comm so far (grow.c), numbered alike on every rank: the
     * next grow's id is derived from the parent's secret with it. */
    uint32_t ngrows;
    /* Splits of comm so far (split.c), the same on every rank: each
     * child's secret is derived from the parent's with it. */
    uint32_t nsplits;

    /* Memory registrations (reg.h), newest first. */
    struct shoal_reg *regs;
    /* One-sided communication (rma.h): windows and signal counts. */
    struct shoal_rma *rma;

    /* Failure detection (fault.h). sig is the running operation's
     * signature (team.hdr carries its bytes on every piece) and nseq
     * counts the collectives run, both written by the executor only. cause says why the running operation failed, set
     * where that was found; the watch state is guarded by watch_lock. */
    shoal_sig_t sig;
    uint64_t nseq;
    char cause[SHOAL_ERROR_MAX];
    pthread_mutex_t watch_lock;
    uint64_t watch_next_ns;   /* the bootstrap is polled again after this */
    int news;                 /* the failure came from another rank: not told again */
    struct shoal_flight *flight; /* recent operations, logged on a failure (flight.h) */
    uint64_t flight_cur;      /* the running task's record; executor only */

    /* The handle (comm.c, core/handle.h): comm's memory is a shell of the
     * communicator pool, never freed, so a stale handle may still read
     * magic and serial and count itself in active (and, leaving, read
     * orphan), and a new communicator in the shell resets every field but
     * these four, which stay together in this order. magic is
     * SHOAL_COMM_LIVE while comm may be entered, SHOAL_COMM_ABORTING during
     * its abort, 0 otherwise; serial is distinct for every communicator
     * this process made. An abort or destroy whose calls did not all leave
     * by the deadline hands comm to the last of them, which frees it
     * (shoal_comm_leave): orphan is 1 once handed over, 2 once one side
     * claimed the freeing. */
    _Atomic uint64_t magic;
    _Atomic uint64_t serial;
    atomic_int active;        /* API calls in flight; abort waits for them (bounded) */
    atomic_int orphan;
    atomic_int error;         /* sticky: a failed peer or deadline breaks comm */
    char last_error[SHOAL_ERROR_MAX];
};

#define SHOAL_COMM_LIVE 0x73686f616c636f6dull     /* "shoalcom" */
#define SHOAL_COMM_ABORTING 0x73686f616c61626full /* "shoalabo" */

/* Record the reason of a failure on comm (shoal_comm_last_error) and log it
 * at error level once. Returns status, so callers can `return
 * shoal_comm_fail(...)` from API entry points. */
shoal_status_t shoal_comm_fail(struct shoal_comm *comm, shoal_status_t status,
                               const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Whether comm is a live communicator of this process: a shell of the
 * communicator pool whose magic says live. Takes no lock and reads nothing
 * but the pool's table and comm's magic. */
int shoal_comm_valid(const struct shoal_comm *comm);

/* API entry: comm live, not aborted, no sticky error; on SHOAL_OK the call
 * is counted in flight until shoal_comm_leave, so that an abort from another
 * thread frees comm only after it returned. Records and returns the reason
 * otherwise (for a NULL or dead comm: thread-local). */
shoal_status_t shoal_comm_enter(struct shoal_comm *comm, const char *caller);
/* The end of an entered call. The last call out of a communicator whose
 * abort or destroy gave up waiting for it (shoal_comm_wait_calls) frees
 * it: the caller must not touch comm afterwards. */
void shoal_comm_leave(struct shoal_comm *comm);

/* Wait until at most keep API calls are counted in comm (the caller's own,
 * when it holds comm entered), for no longer than comm's SHOAL_TIMEOUT:
 * the abort flag is set and the executor stopped (shoal_exec_stop) by
 * then, so every call polls its way out within a fraction of a second,
 * and the deadline bounds a call that would not. SHOAL_OK, or
 * SHOAL_ERR_TIMEOUT logged with the number of calls still inside and what
 * (the waiting caller's name) gave up. */
shoal_status_t shoal_comm_wait_calls(struct shoal_comm *comm, int keep, const char *what);

/* The same for calls that work on a broken or aborted communicator (local
 * calls, shrink): only checks that comm is live. */
shoal_status_t shoal_comm_enter_any(struct shoal_comm *comm, const char *caller);

/* Enter comm again after leaving it, if it is still the live communicator
 * of that serial (not freed meanwhile, its address not reused); 1 if so,
 * and the caller then leaves it with shoal_comm_leave. Records nothing.
 * Safe on a freed comm: its shell stays readable and a communicator made
 * in it since has another serial. */
int shoal_comm_reenter(struct shoal_comm *comm, uint64_t serial);

/* shoal_comm_destroy without its closing barrier: the queue drains and
 * everything is freed without waiting for any peer (the NCCL door's
 * destroy, where one thread may hold several ranks of a communicator). */
shoal_status_t shoal_comm_release(shoal_comm_t comm);

/* Stop comm's operations as shoal_comm_abort does, without freeing comm
 * (what shoal_comm_shrink with SHOAL_SHRINK_ABORT does first; the NCCL
 * door's revoke): calls in flight on other threads and queued operations
 * complete with SHOAL_ERR_ABORTED, later operations are refused with it,
 * and shrink, the registration calls and the queries still work; destroy
 * and abort then free comm at once. Enters comm itself, so the caller must
 * not hold it entered (it would wait for itself); SHOAL_ERR_INVALID_ARG
 * (recorded thread-locally) if comm is not live; SHOAL_ERR_TIMEOUT if calls
 * on other threads were still inside comm at its deadline (comm is stopped
 * all the same; destroy and abort wait for them again). Idempotent. Like
 * shoal_comm_abort it may run while other threads' operations or a split
 * are in flight (the split's init is cut short), but not concurrently with
 * shrink, destroy or another stop of comm. */
shoal_status_t shoal_comm_stop(struct shoal_comm *comm);

/* Make status sticky on comm when it means the communicator is broken
 * (SHOAL_ERR_PEER, SHOAL_ERR_TIMEOUT, SHOAL_ERR_ABORTED); returns status. */
shoal_status_t shoal_comm_set_error(struct shoal_comm *comm, shoal_status_t status);

/* A pre-multiplied sum: SUM of scalar * input, scalar of dtype. */
typedef struct shoal_premul {
    int used;
    shoal_dtype_t dtype;
    unsigned char scalar[8];
    const void *ref;   /* non-NULL: the scalar is read here when a call runs */
} shoal_premul_t;

/* Peer's endpoint; NULL for self. */
static inline shoal_ep_t *shoal_comm_ep(struct shoal_comm *comm, int peer)
{
    return comm->team.eps[peer];
}

/* The communicator a team belongs to (every team core makes is embedded
 * in one). */
static inline struct shoal_comm *shoal_team_comm(shoal_team_t *team)
{
    return (struct shoal_comm *)((char *)team - offsetof(struct shoal_comm, team));
}

/* The running operation's signature: kept typed for core, and as the
 * header bytes every piece of the team carries. Executor only. */
static inline void shoal_comm_set_sig(struct shoal_comm *comm, shoal_sig_t sig)
{
    comm->sig = sig;
    memcpy(comm->team.hdr, &sig, sizeof(sig));
}

/* The team's hooks into core (fault watch, causes, mismatches,
 * registrations), for every communicator's team. */
extern const shoal_team_hooks_t shoal_comm_team_hooks;

/* Shrink (shrink.c): open this rank's rendezvous listener on the
 * bootstrap's local address (comm->rdv_fd) and pack its address for the
 * init exchange. Called once by shoal_comm_init. */
shoal_status_t shoal_shrink_listen(struct shoal_comm *comm,
                                   uint8_t packed[SHOAL_BOOT_ADDR_BYTES]);
/* The rendezvous of a new communicator that a shrink or grow forms
 * (shrink.c): the secret HMAC-SHA256(comm's secret, msg) (failure recorded
 * on comm, what naming the call); a big-endian 32-bit integer for msg;
 * lead: listen on this rank's rendezvous socket and offer it to the
 * bootstrap under id, so that this rank's shoal_comm_init as rank 0 of id
 * accepts there; unlisten: after the init, close it and bind the port
 * again (re-entering comm, unless it is gone since serial). */
shoal_status_t shoal_rdv_secret(struct shoal_comm *comm, const char *what, const uint8_t *msg,
                                size_t len, uint8_t secret[SHOAL_SECRET_BYTES]);
void shoal_rdv_put_u32(uint8_t *p, uint32_t v);
shoal_status_t shoal_rdv_lead(struct shoal_comm *comm, const shoal_unique_id_t *id);
void shoal_rdv_unlisten(struct shoal_comm *comm, uint64_t serial);

/* This process's host identity (SHOAL_HOST_ID, else hostname + boot id). */
void shoal_host_id(char out[SHOAL_HOST_ID_MAX]);

#endif
