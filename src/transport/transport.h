/* The transport interface. A transport is one static const ops table with a
 * leading size field and no NULL slots (stubs.c has shared stubs that
 * return SHOAL_ERR_UNSUPPORTED), registered in the ordered list of
 * transport.c.
 *
 * Lifecycle, driven by shoal_transport_wireup():
 *   open -> addr_pack -> (bootstrap all-gather of address blobs)
 *   -> connect(peer) for every peer it reaches, in increasing peer order
 *   -> (bootstrap barrier) -> ready -> data ops and progress -> disconnect
 *   -> close.
 *
 * Data moves through a FIFO of slots per endpoint and direction, each slot at
 * most comm->chunk_size bytes. The sender asks for the next free slot, writes
 * into it (for shm that is the receiver's memory) and posts it; the receiver
 * gets the oldest arrived slot, reads it in place and releases it. Messages
 * arrive in order. Every message carries the sender's operation signature
 * (sig.h) beside its length, so the receiver can check it before reading.
 * No op blocks: "not yet" is SHOAL_INPROGRESS, and the caller drives
 * progress() until its deadline. */
#ifndef SHOAL_TRANSPORT_H
#define SHOAL_TRANSPORT_H

#include "core/sig.h"
#include "shoal.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct shoal_comm;
typedef struct shoal_transport_ops shoal_transport_ops_t;

#define SHOAL_TL_ADDR_MAX 256

typedef enum {
    SHOAL_MEM_HOST = 0,
    SHOAL_MEM_CUDA = 1,
} shoal_mem_kind_t;

/* Base of every transport context; transports embed it first. */
typedef struct shoal_tl_ctx {
    const shoal_transport_ops_t *ops;
    struct shoal_comm *comm;
} shoal_tl_ctx_t;

/* Base of every endpoint (one per connected peer); embedded first. */
typedef struct shoal_ep {
    const shoal_transport_ops_t *ops;
    shoal_tl_ctx_t *ctx;
    int peer;
    /* Payload bytes posted to and released from the peer since connect,
     * counted by the transport (relaxed: only the operation's executor
     * writes them; the flight recorder reads them from any thread). */
    atomic_ullong tx_bytes;
    atomic_ullong rx_bytes;
} shoal_ep_t;

/* A registered memory region; transports may embed it first. */
typedef struct shoal_mem {
    void *addr;
    size_t len;
    shoal_mem_kind_t kind;
} shoal_mem_t;

typedef struct {
    int reachable;      /* 1 if this transport can connect to the peer */
    double latency_us;  /* cost model inputs */
    double bandwidth_gbs;
} shoal_tl_caps_t;

struct shoal_transport_ops {
    size_t size; /* sizeof(shoal_transport_ops_t) */
    const char *name;

    /* Whether and at what cost this transport reaches peer. Never fails for
     * an unreachable peer: it reports reachable = 0. */
    shoal_status_t (*query)(struct shoal_comm *comm, int peer, shoal_tl_caps_t *caps_p);

    shoal_status_t (*open)(struct shoal_comm *comm, shoal_tl_ctx_t **ctx_p);
    /* Bounded address blob (<= SHOAL_TL_ADDR_MAX) that peers connect with. */
    shoal_status_t (*addr_pack)(shoal_tl_ctx_t *ctx, void *blob, size_t *len_p);
    /* Called by every rank for each reachable peer in increasing peer order;
     * may block until the deadline but must not deadlock under that order. */
    shoal_status_t (*connect)(shoal_tl_ctx_t *ctx, int peer, const void *blob, size_t len,
                              uint64_t deadline_ns, shoal_ep_t **ep_p);
    /* All peers have connected (after a barrier): drop what wireup needed,
     * e.g. shared-memory names. */
    shoal_status_t (*ready)(shoal_tl_ctx_t *ctx);

    shoal_status_t (*send_slot)(shoal_ep_t *ep, void **buf_p, size_t *cap_p);
    /* Post the slot's first len bytes, with sig (NULL: all zero). */
    shoal_status_t (*send_post)(shoal_ep_t *ep, size_t len, const shoal_sig_t *sig);
    /* The oldest arrived message; *sig_p (when not NULL) gets its signature. */
    shoal_status_t (*recv_slot)(shoal_ep_t *ep, const void **buf_p, size_t *len_p,
                                shoal_sig_t *sig_p);
    shoal_status_t (*recv_release)(shoal_ep_t *ep);
    /* SHOAL_OK once every posted message has left this process (it is in
     * the peer's memory or in the kernel, which delivers it even after this
     * rank stops calling progress or closes); SHOAL_INPROGRESS, after
     * pushing what it can, while some still wait in this process. An
     * operation drives progress until its send endpoints flush before it
     * returns, or a peer could wait for bytes that nobody pushes. */
    shoal_status_t (*flush)(shoal_ep_t *ep);
    /* Advance I/O of every endpoint; SHOAL_ERR_PEER names the lost peer in
     * the log. SHOAL_OK when nothing failed (whether or not anything moved). */
    shoal_status_t (*progress)(shoal_tl_ctx_t *ctx);
    /* A wait of waited_ns so far found nothing to do: SHOAL_OK after
     * sleeping until a peer may have moved something for this rank (or
     * timeout_ns); SHOAL_INPROGRESS when it would rather the caller poll on
     * (the wait is young); SHOAL_ERR_UNSUPPORTED when it cannot sleep. The
     * caller checks its condition again either way. */
    shoal_status_t (*sleep)(shoal_tl_ctx_t *ctx, uint64_t waited_ns, uint64_t timeout_ns);

    /* Memory registration, for transports that write remote memory. */
    shoal_status_t (*mem_reg)(shoal_tl_ctx_t *ctx, void *addr, size_t len,
                              shoal_mem_kind_t kind, shoal_mem_t **mem_p);
    shoal_status_t (*mem_dereg)(shoal_tl_ctx_t *ctx, shoal_mem_t *mem);
    /* One-sided write of len bytes into the peer's registered memory at
     * remote_off, then a completion signal the peer can wait on. */
    shoal_status_t (*put_signal)(shoal_ep_t *ep, const shoal_mem_t *local, size_t local_off,
                                 uint64_t remote_key, size_t remote_off, size_t len);

    void (*disconnect)(shoal_ep_t *ep);
    void (*close)(shoal_tl_ctx_t *ctx);
};

/* Shared stubs for transports without the capability. */
shoal_status_t shoal_tl_stub_ready(shoal_tl_ctx_t *ctx);
shoal_status_t shoal_tl_stub_sleep(shoal_tl_ctx_t *ctx, uint64_t waited_ns, uint64_t timeout_ns);
shoal_status_t shoal_tl_stub_mem_reg(shoal_tl_ctx_t *ctx, void *addr, size_t len,
                                     shoal_mem_kind_t kind, shoal_mem_t **mem_p);
shoal_status_t shoal_tl_stub_mem_dereg(shoal_tl_ctx_t *ctx, shoal_mem_t *mem);
shoal_status_t shoal_tl_stub_put_signal(shoal_ep_t *ep, const shoal_mem_t *local,
                                        size_t local_off, uint64_t remote_key,
                                        size_t remote_off, size_t len);
shoal_status_t shoal_tl_stub_progress(shoal_tl_ctx_t *ctx);
/* flush for transports whose send_post already delivers (shm): SHOAL_OK. */
shoal_status_t shoal_tl_stub_flush(shoal_ep_t *ep);

/* Generic registration for transports that need no keys (shm, tcp): records
 * addr, len and kind in a malloc'd shoal_mem_t that mem_dereg frees. */
shoal_status_t shoal_tl_host_mem_reg(shoal_tl_ctx_t *ctx, void *addr, size_t len,
                                     shoal_mem_kind_t kind, shoal_mem_t **mem_p);
shoal_status_t shoal_tl_host_mem_dereg(shoal_tl_ctx_t *ctx, shoal_mem_t *mem);

extern const shoal_transport_ops_t shoal_shm_ops;
extern const shoal_transport_ops_t shoal_tcp_ops;

/* Open every enabled transport, pick one per peer (first reachable in list
 * order), connect, and fill comm->eps. Collective over the communicator. */
shoal_status_t shoal_transport_wireup(struct shoal_comm *comm);

/* Progress every open transport context of comm. */
shoal_status_t shoal_transport_progress(struct shoal_comm *comm);
/* A wait that has found nothing for waited_ns: let the transport sleep
 * until a peer may have moved something (see the sleep op). Only a
 * communicator whose endpoints all use one transport sleeps (another one
 * that needs polling would stall meanwhile); SHOAL_ERR_UNSUPPORTED
 * otherwise. */
shoal_status_t shoal_transport_sleep(struct shoal_comm *comm, uint64_t waited_ns,
                                     uint64_t timeout_ns);

/* Disconnect every endpoint and close every context. */
void shoal_transport_teardown(struct shoal_comm *comm);

#endif
