/* What the staged and direct paths of stream-ordered calls share
 * (dev_stage.c, dev_direct.c): the communicator's device state. */
#ifndef SHOAL_DEV_PRIV_H
#define SHOAL_DEV_PRIV_H

#include "base/dev.h"
#include "exec.h"

#include <pthread.h>
#include <stdint.h>

struct shoal_dev_slot {
    struct shoal_dev_slot *next;
    uint32_t *flags;  /* the allocation: flags, then the payload at SLOT_HEAD */
    size_t cap;       /* payload bytes */
    uint32_t seq;     /* of its last use */
    int busy;
};

/* A peer's device allocation opened in this process (dev_direct.c). */
typedef struct shoal_dev_peer_mem {
    struct shoal_dev_peer_mem *next;
    int peer;
    uint64_t base, size;  /* the allocation in the peer's address space */
    shoal_dev_ipc_t handle;
    void *mapped;         /* its base here */
} shoal_dev_peer_mem_t;

struct shoal_dev_comm {
    pthread_mutex_t lock;
    const shoal_dev_ops_t *ops;
    struct shoal_dev_slot *slots;
    size_t kept;      /* payload bytes of all slots */
    uint32_t seq;
    /* The direct path's, used by the executor only: its stream (on
     * stream_dev) and the peers' allocations it opened. */
    void *stream;
    int stream_dev;
    shoal_dev_peer_mem_t *peer_mems;
    shoal_dev_peer_mem_t *peer_stale; /* replaced by a newer allocation */
    void *scratch;        /* an in-place all-to-all's input, on scratch_dev */
    size_t scratch_bytes;
    int scratch_dev;
    void *host_scratch;   /* pinned memory for staging a call here */
    size_t host_scratch_bytes;
    int fallback_logged;
    unsigned long staged_by_cost; /* calls the cost model staged (for tests) */
    unsigned long direct_runs;    /* calls that went device to device (for tests) */
};


/* Where call c's data goes in host memory: need payload bytes, with the
 * input at in_off and the output at out_off; dev_in and dev_out say which
 * side is device memory (the others the host reaches as they are), and
 * together that an in-place call keeps both in one region, as they lie. */
typedef struct {
    size_t need, in_off, out_off;
    int dev_in, dev_out, together;
} shoal_dev_layout_t;
void shoal_dev_stage_layout(const shoal_call_t *c, shoal_dev_layout_t *l);

/* The direct path (dev_direct.c). Whether call takes it: a collective it
 * has a schedule for, on a communicator of one host, with the path not
 * set to staged. The answer depends only on what every rank sees alike.
 * Then call->run is its host side. */
int shoal_dev_direct_takes(const struct shoal_comm *comm, const shoal_call_t *call);
/* The collective kinds the direct path (and one rank's copy) serve. */
int shoal_dev_direct_takes_kind(shoal_coll_kind_t kind);
shoal_status_t shoal_dev_direct_run(struct shoal_comm *comm, const shoal_call_t *call);

/* The pieces of the direct path, for host sides of their own (the
 * compressed all-reduce, api/compressor_dev.c); executor only.
 * - pays: the cost model's choice for call (1 unless SHOAL_CUDA_PATH is
 *   auto), alike on every rank;
 * - stream: the executor's stream on device dev;
 * - share: export this rank's send and recv buffers (bytes 0: none),
 *   all-gather the exports, open the peers' (cached) into ps[q] and
 *   pr[q] (pr may be NULL: no recv buffers), and agree; *all_ok_p says
 *   whether every rank could (can: whether this rank may go direct at
 *   all), else the caller stages, as every rank does (logged once);
 * - barrier: of the call's communicator, under the call's name. */
int shoal_dev_direct_pays(const struct shoal_comm *comm, const shoal_call_t *call);
shoal_status_t shoal_dev_direct_stream(struct shoal_comm *comm, const shoal_call_t *call, int dev,
                                       void **stream_p);
shoal_status_t shoal_dev_direct_share(struct shoal_comm *comm, const shoal_call_t *call, int can,
                                      const void *send, size_t sbytes, void *recv,
                                      size_t rbytes, char **ps, char **pr, int *all_ok_p);
shoal_status_t shoal_dev_direct_barrier(struct shoal_comm *comm, const shoal_call_t *call);
/* Close the peers' allocations and the stream (comm's destroy). */
void shoal_dev_direct_release(struct shoal_dev_comm *d);

#endif
