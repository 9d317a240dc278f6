/* The communicator object, shared by core, algorithms and transports. */
#ifndef SHOAL_COMM_H
#define SHOAL_COMM_H

#include "bootstrap.h"
#include "config.h"
#include "shoal.h"
#include "transport/transport.h"

#include <stdatomic.h>
#include <stdint.h>

#define SHOAL_MAX_TRANSPORTS 4
#define SHOAL_HOST_ID_MAX SHOAL_CONFIG_STR_MAX
#define SHOAL_ERROR_MAX 512

struct shoal_comm {
    int rank;
    int nranks;
    uint64_t timeout_ns;      /* deadline length of every blocking wait */
    size_t chunk_size;        /* bytes per pipeline piece and transport slot */
    shoal_bootstrap_t *bootstrap;

    /* Host identity of every rank, from the bootstrap exchange. */
    char (*host_ids)[SHOAL_HOST_ID_MAX];
    int *host_of;             /* dense host index of each rank */
    int nhosts;

    shoal_tl_ctx_t *tl_ctx[SHOAL_MAX_TRANSPORTS]; /* open transports, NULL-terminated */
    int ntl;
    shoal_ep_t **eps;         /* eps[peer]; NULL for self */

    /* Cost model inputs: the slowest link to any peer (see algos/algo.h). */
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

    struct shoal_exec *exec;  /* operation queue and progress thread (exec.h) */

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

/* Make status sticky on comm when it means the communicator is broken
 * (SHOAL_ERR_PEER, SHOAL_ERR_TIMEOUT, SHOAL_ERR_ABORTED); returns status. */
shoal_status_t shoal_comm_set_error(struct shoal_comm *comm, shoal_status_t status);

/* A pre-multiplied sum: SUM of scalar * input, scalar of dtype. */
typedef struct shoal_premul {
    int used;
    shoal_dtype_t dtype;
    unsigned char scalar[8];
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

/* This process's host identity (SHOAL_HOST_ID, else hostname + boot id). */
void shoal_host_id(char out[SHOAL_HOST_ID_MAX]);

#endif
