/* The communicator object, shared by core, algorithms and transports. */
#ifndef SHOAL_COMM_H
#define SHOAL_COMM_H

#include "bootstrap.h"
#include "base/config.h"
#include "shoal.h"
#include "sig.h"
#include "topo/cluster.h"
#include "topo/links.h"
#include "transport/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define SHOAL_MAX_TRANSPORTS 4
#define SHOAL_HOST_ID_MAX SHOAL_CONFIG_STR_MAX
#define SHOAL_ERROR_MAX 512
#define SHOAL_TAG_BYTES 16

struct shoal_reg;

/* The cost model's last choice for one collective and the arguments it
 * was made for (select.c). */
typedef struct {
    const void *algo; /* const shoal_algo_ops_t *; NULL before the first */
    size_t count;
    int dtype, op, root;
    unsigned settings; /* shoal_config_generation() then */
} shoal_algo_memo_t;
#define SHOAL_ALGO_MEMO_KINDS 16

struct shoal_comm {
    int rank;
    int nranks;
    uint64_t timeout_ns;      /* deadline length of every blocking wait */
    size_t chunk_size;        /* bytes per pipeline piece and transport slot */
    /* An operation whose output on this rank reaches stream_min bytes
     * writes it with streaming stores (stream_out set while it runs; see
     * shoal_move_out in algos/prims.h). */
    size_t stream_min;
    int stream_out;
    shoal_bootstrap_t *bootstrap;

    /* Host identity of every rank, from the bootstrap exchange. */
    char (*host_ids)[SHOAL_HOST_ID_MAX];
    int *host_of;             /* dense host index of each rank */
    int nhosts;
    /* Hosts, local ranks, rails and ring order, built from the same
     * exchange (topo/cluster.h). */
    shoal_cluster_t cluster;
    /* Every rank's process id (for messages) and a random tag of its own
     * for this communicator, also from the init exchange: transports name
     * what they create in the file system after it, so that the other
     * ranks of the host can find and remove it should the rank die before
     * its wireup finished. */
    uint32_t *pids;
    uint8_t (*tags)[SHOAL_TAG_BYTES];

    shoal_tl_ctx_t *tl_ctx[SHOAL_MAX_TRANSPORTS]; /* open transports, NULL-terminated */
    int ntl;
    /* The one transport every endpoint uses, when there is one (waits may
     * then sleep in it); NULL when endpoints span transports. */
    shoal_tl_ctx_t *tl_sole;
    shoal_ep_t **eps;         /* eps[peer]; NULL for self */

    /* Cost model inputs: the link classes (topo/links.h), and the slowest
     * link any two ranks use, for the flat algorithms (algos/algo.h). */
    shoal_links_t links;
    double link_lat_s;
    double link_bw_Bps;

    /* Pre-multiplied sums: op SHOAL_OP_COUNT + i is premul[i] while used. */
    struct shoal_premul *premul;
    int npremul;

    /* Working memory of the running operation (one runs at a time): the
     * algorithm's scratch, and the core's staged input (pre-multiplied,
     * in-place all-to-all, fused all-reduces). Kept between operations so
     * that repeated calls do not fault fresh pages in. */
    void *scratch;
    size_t scratch_bytes;
    void *stage;
    size_t stage_bytes;
    /* The kernels every pass of a schedule over local memory goes through
     * (algos/kernels.h): the host's, or in a simulation (src/sim/) kernels
     * that touch no data and count the bytes of each pass in the state
     * kern_ctx points to. */
    const struct shoal_kernels *kern;
    void *kern_ctx;
    /* Payload bytes this rank posted to and took from its endpoints, over
     * the communicator's life (prims.c, xfer.c): a compressed call's
     * shoal_compress_info_t is the difference across it. */
    uint64_t tx_bytes, rx_bytes;

    struct shoal_exec *exec;  /* operation queue and progress thread (exec.h) */

    /* Shrink (shrink.c): this rank's rendezvous listener, open for the
     * communicator's life, and every rank's address of it, from the init
     * exchange. A shrink's lowest surviving rank accepts the others on its
     * listener, so the new communicator forms without the parent's
     * bootstrap star or data transports. nshrinks numbers the shrinks of
     * comm, the same on every rank that took part in all of them. */
    int rdv_fd;
    shoal_sockaddr_t *rdv_addrs;
    uint32_t nshrinks;

    /* Memory registrations (reg.h), newest first. */
    struct shoal_reg *regs;

    /* Failure detection (fault.h). sig is the running operation's
     * signature and nseq counts the collectives run, both written by the
     * executor only. cause says why the running operation failed, set
     * where that was found; the watch state is guarded by watch_lock. */
    shoal_sig_t sig;
    shoal_algo_memo_t algo_memo[SHOAL_ALGO_MEMO_KINDS]; /* per collective kind */
    /* The last plan run per collective kind (algos/algo.h: shoal_plan_get),
     * kept for the next call of the same shape; executor only. */
    struct shoal_plan *plans[SHOAL_ALGO_MEMO_KINDS];
    uint64_t nseq;
    char cause[SHOAL_ERROR_MAX];
    pthread_mutex_t watch_lock;
    uint64_t watch_next_ns;   /* the bootstrap is polled again after this */
    int news;                 /* the failure came from another rank: not told again */
    struct shoal_flight *flight; /* recent operations, logged on a failure (flight.h) */
    uint64_t flight_cur;      /* the running task's record; executor only */

    uint64_t serial;          /* distinct for every communicator this process made */
    atomic_int aborted;
    atomic_int error;         /* sticky: a failed peer or deadline breaks comm */
    atomic_int active;        /* API calls in flight; abort waits for them */
    char last_error[SHOAL_ERROR_MAX];
};

/* Record the reason of a failure on comm (shoal_comm_last_error) and log it
 * at error level once. Returns status, so callers can `return
 * shoal_comm_fail(...)` from API entry points. */
shoal_status_t shoal_comm_fail(struct shoal_comm *comm, shoal_status_t status,
                               const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Whether comm is a live communicator of this process. */
int shoal_comm_valid(const struct shoal_comm *comm);

/* API entry: comm live, not aborted, no sticky error; on SHOAL_OK the call
 * is counted in flight until shoal_comm_leave, so that an abort from another
 * thread frees comm only after it returned. Records and returns the reason
 * otherwise (for a NULL or dead comm: thread-local). */
shoal_status_t shoal_comm_enter(struct shoal_comm *comm, const char *caller);
void shoal_comm_leave(struct shoal_comm *comm);

/* The same for calls that work on a broken or aborted communicator (local
 * calls, shrink): only checks that comm is live. */
shoal_status_t shoal_comm_enter_any(struct shoal_comm *comm, const char *caller);

/* Enter comm again after leaving it, if it is still the live communicator
 * of that serial (not freed meanwhile, its address not reused); 1 if so,
 * and the caller then leaves it with shoal_comm_leave. Records nothing. */
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
 * (recorded thread-locally) if comm is not live. Idempotent. Like
 * shoal_comm_abort it may run while other threads' operations are in
 * flight, but not concurrently with split, shrink, destroy or another
 * stop of comm. */
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

/* At least bytes of working memory for the operation running on comm,
 * kept until comm is freed (or the next larger request). Only the
 * operation's executor may call it. */
shoal_status_t shoal_comm_scratch(struct shoal_comm *comm, size_t bytes, void **buf_p);
/* The same for the core's staged input. */
shoal_status_t shoal_comm_stage(struct shoal_comm *comm, size_t bytes, void **buf_p);

/* Peer's endpoint; NULL for self. */
static inline shoal_ep_t *shoal_comm_ep(struct shoal_comm *comm, int peer)
{
    return comm->eps[peer];
}

/* Shrink (shrink.c): open this rank's rendezvous listener on the
 * bootstrap's local address (comm->rdv_fd) and pack its address for the
 * init exchange. Called once by shoal_comm_init. */
shoal_status_t shoal_shrink_listen(struct shoal_comm *comm,
                                   uint8_t packed[SHOAL_BOOT_ADDR_BYTES]);

/* This process's host identity (SHOAL_HOST_ID, else hostname + boot id). */
void shoal_host_id(char out[SHOAL_HOST_ID_MAX]);

#endif
