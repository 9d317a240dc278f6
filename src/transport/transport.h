/* The transport interface. A transport is one static const ops table with a
 * leading size field and no NULL slots (stubs.c has shared stubs that
 * return SHOAL_ERR_UNSUPPORTED), registered in the ordered list of
 * registry.c.
 *
 * Lifecycle, driven by the communicator's wireup (core/wireup.c):
 *   open(params) -> addr_pack -> (bootstrap all-gather of address blobs)
 *   -> connect(peer) for every peer it reaches, in increasing peer order
 *   (which may defer the sockets to the first use, as lazy tcp does)
 *   -> (bootstrap barrier) -> ready -> data ops and progress -> disconnect
 *   -> close.
 * A transport sees only the narrow shoal_tl_params_t it is opened with,
 * never the communicator.
 *
 * Data moves through a FIFO of slots per endpoint and direction, each slot at
 * most params.chunk_size bytes. The sender asks for the next free slot,
 * writes into it (for shm that is the receiver's memory) and posts it; the
 * receiver gets the oldest arrived slot, reads it in place and releases it.
 * Messages arrive in order. Every message carries beside its length a
 * header of SHOAL_TL_HDR_BYTES that the layer above gives (the operation's
 * signature) and the transport delivers unchanged without knowing its type,
 * so the receiver can check it before reading. No op blocks: "not yet" is
 * SHOAL_INPROGRESS, and the caller drives progress() until its deadline.
 *
 * Memory domain: mem_reg tells what a region is (its kind: private host,
 * host that peers of this host can map, device) and keeps what the
 * transport needs to let peers reach it; rkey_pack turns part of a
 * registration into a bounded remote key to send to a peer, rkey_attach
 * makes a peer's key usable on the endpoint to that peer, and put_signal
 * writes straight into the attached memory and then signals the peer
 * through the FIFO (zero-copy); get reads from it instead (a pull, which
 * the reader signals itself). Transports without it use the stubs, and
 * callers fall back to slots. */
#ifndef SHOAL_TRANSPORT_H
#define SHOAL_TRANSPORT_H

#include "base/sock.h"
#include "shoal.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct shoal_transport_ops shoal_transport_ops_t;

#define SHOAL_TL_ADDR_MAX 256
/* Bytes of the opaque per-message header the transports carry. */
#define SHOAL_TL_HDR_BYTES 24
/* Bytes of a remote key at most. */
#define SHOAL_TL_RKEY_MAX 64
/* Bytes of a device name in shoal_tl_params_t, with its NUL. */
#define SHOAL_TL_NIC_MAX 64
/* Bytes of a rank's random tag (see shoal_tl_params_t). */
#define SHOAL_TL_TAG_BYTES 16

typedef enum {
    SHOAL_MEM_HOST = 0,        /* host memory private to this process */
    SHOAL_MEM_CUDA = 1,        /* device memory */
    SHOAL_MEM_HOST_SHARED = 2, /* host memory that peers of this host can map
                                * (shoal_mem_alloc) */
} shoal_mem_kind_t;

/* What a transport may ask of the bootstrap network for its own
 * exchanges: the local address peers can reach and the job's secret that
 * every connection must prove. handle is passed back to each function. */
typedef struct {
    void *handle;
    const shoal_sockaddr_t *(*local_addr)(const void *handle);
    const uint8_t *(*secret)(const void *handle); /* SHOAL_SECRET_BYTES (base/auth.h) */
} shoal_tl_boot_t;

/* Everything a transport is opened with. The arrays have nranks entries
 * and outlive the context (the wireup's owner keeps them). */
typedef struct {
    int rank;
    int nranks;
    size_t chunk_size;        /* bytes per slot */
    const int *host_of;       /* dense host index of each rank */
    /* Every rank's process id and a random tag of its own, known to every
     * rank before any transport opens: what a transport names in the file
     * system after them can be found and removed by the others should its
     * owner die before wireup finished. */
    const uint32_t *pids;
    const uint8_t (*tags)[SHOAL_TL_TAG_BYTES];
    shoal_tl_boot_t boot;
    uint64_t timeout_ns;      /* how long a wait on peers at ready may last */
    /* The OpenFabrics device of the NIC nearest this rank in its host's
     * topology; "" when none is known. */
    char nic[SHOAL_TL_NIC_MAX];
    int host_cpus; /* CPUs this rank's host lets its ranks use; 0: unknown */
} shoal_tl_params_t;

/* Whether the communicator's ranks on this rank's host outnumber the CPUs
 * the host lets them use: a rank that polls then takes the CPU from a rank
 * sharing it. An unknown count (host_cpus 0) counts as enough CPUs. */
static inline int shoal_tl_crowded(const shoal_tl_params_t *par)
{
    int nlocal = 0;
    for (int q = 0; q < par->nranks; q++)
        nlocal += par->host_of[q] == par->host_of[par->rank];
    return par->host_cpus > 0 && nlocal > par->host_cpus;
}

/* Base of every transport context; transports embed it first. */
typedef struct shoal_tl_ctx {
    const shoal_transport_ops_t *ops;
    /* What it was opened with (copied by open). */
    shoal_tl_params_t params;
    /* Set by ready where the transport measured the piece size that every
     * rank of the communicator is to use (no larger than params.chunk_size);
     * 0: no opinion. */
    size_t piece;
    /* Set by open where the transport knows the rate its link runs at
     * (bytes per second of data; an RDMA port's); 0: unknown. */
    double link_Bps;
    /* The device (and port) it moves data through, for introspection:
     * "rxe0:1"; "" for none. */
    char dev[SHOAL_TL_NIC_MAX];
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
    /* Zero-copy writes into the peer's memory (put_signal) and their
     * bytes, counted the same way. */
    atomic_ullong puts;
    atomic_ullong put_bytes;
    /* Reads from the peer's memory (get) and their bytes. */
    atomic_ullong gets;
    atomic_ullong get_bytes;
    /* Set by the transport while the endpoint has no connection (lazy tcp
     * before either end first used it): nothing can have arrived on it,
     * and a look for messages would make one. Only the operations'
     * executor reads it. */
    int offline;
} shoal_ep_t;

/* A registered memory region; transports may embed it first. */
typedef struct shoal_mem {
    void *addr;
    size_t len;
    shoal_mem_kind_t kind;
} shoal_mem_t;

/* A peer's memory attached on an endpoint (rkey_attach): where this
 * process writes it (addr, when the transport maps it) and its length. */
typedef struct shoal_rmem {
    void *addr;
    size_t len;
} shoal_rmem_t;

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
    shoal_status_t (*query)(const shoal_tl_params_t *params, int peer, shoal_tl_caps_t *caps_p);

    /* SHOAL_ERR_UNSUPPORTED: not in use on this rank (disabled, or no peer
     * it could reach). */
    shoal_status_t (*open)(const shoal_tl_params_t *params, shoal_tl_ctx_t **ctx_p);
    /* Bounded address blob (<= SHOAL_TL_ADDR_MAX) that peers connect with. */
    shoal_status_t (*addr_pack)(shoal_tl_ctx_t *ctx, void *blob, size_t *len_p);
    /* Called by every rank for each reachable peer in increasing peer order;
     * may block until the deadline but must not deadlock under that order.
     * A transport may only make the endpoint here and connect it when an
     * operation first asks it for a slot (lazy tcp): its send_slot and
     * recv_slot then say SHOAL_INPROGRESS meanwhile, and its progress
     * serves the peers that dial it. */
    shoal_status_t (*connect)(shoal_tl_ctx_t *ctx, int peer, const void *blob, size_t len,
                              uint64_t deadline_ns, shoal_ep_t **ep_p);
    /* All peers have connected (after a barrier): drop what wireup needed,
     * e.g. shared-memory names. */
    shoal_status_t (*ready)(shoal_tl_ctx_t *ctx);

    shoal_status_t (*send_slot)(shoal_ep_t *ep, void **buf_p, size_t *cap_p);
    /* Post the slot's first len bytes, with the SHOAL_TL_HDR_BYTES header
     * at hdr (NULL: all zero). Posted bytes are read-only to both ends: the
     * sender may still read them, unchanged, until its next send_slot on
     * ep (the codec stage decodes what it sent from there). */
    shoal_status_t (*send_post)(shoal_ep_t *ep, size_t len, const void *hdr);
    /* The oldest arrived message; hdr_p (when not NULL) gets its
     * SHOAL_TL_HDR_BYTES header. */
    shoal_status_t (*recv_slot)(shoal_ep_t *ep, const void **buf_p, size_t *len_p,
                                void *hdr_p);
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

    /* Memory domain. mem_reg records [addr, addr + len) of the kind the
     * caller knows (HOST or CUDA); the result's kind may be finer
     * (HOST_SHARED when peers of this host can map it). The region belongs
     * to the caller until mem_dereg. */
    shoal_status_t (*mem_reg)(shoal_tl_ctx_t *ctx, void *addr, size_t len,
                              shoal_mem_kind_t kind, shoal_mem_t **mem_p);
    shoal_status_t (*mem_dereg)(shoal_tl_ctx_t *ctx, shoal_mem_t *mem);
    /* A remote key (at most SHOAL_TL_RKEY_MAX bytes into blob; *len_p its
     * capacity in, its length out) that lets a peer write or read [addr,
     * addr + len), which must lie inside mem; mem NULL stands for private
     * host memory the caller did not register. SHOAL_ERR_UNSUPPORTED when
     * peers cannot reach that memory directly (or, for private memory
     * shm reaches by cross-memory attach, not faster than slots at len
     * bytes). */
    shoal_status_t (*rkey_pack)(shoal_tl_ctx_t *ctx, const shoal_mem_t *mem, const void *addr,
                                size_t len, void *blob, size_t *len_p);
    /* The peer's key, made usable on ep. The result belongs to ep and
     * stays valid until ep is disconnected or a later attach on ep needs
     * its place (the endpoint keeps a few, so repeated calls with the same
     * buffers attach nothing new). SHOAL_ERR_UNSUPPORTED when this
     * endpoint cannot reach the key's memory (the caller uses slots). */
    shoal_status_t (*rkey_attach)(shoal_ep_t *ep, const void *blob, size_t len,
                                  const shoal_rmem_t **rmem_p);
    /* Write len bytes from src (inside local, when the transport needs the
     * source registered; NULL otherwise) into the peer's attached memory at
     * remote_off, then post a signal: an empty message with header hdr
     * (SHOAL_TL_HDR_BYTES; NULL: all zero) behind everything posted
     * before, which the peer receives as any other (its arrival means the
     * bytes are in place).
     * SHOAL_INPROGRESS, having done nothing, while no slot is free for the
     * signal; SHOAL_ERR_UNSUPPORTED, having done nothing, when this
     * endpoint cannot put (no endpoint, nothing attached, a copy
     * transport). */
    shoal_status_t (*put_signal)(shoal_ep_t *ep, const void *src, const shoal_mem_t *local,
                                 const shoal_rmem_t *remote, size_t remote_off, size_t len,
                                 const void *hdr);
    /* Read len bytes at remote_off of the peer's attached memory into dst,
     * before returning; no signal (the caller tells the peer it is done,
     * as the peer must keep the memory until then). SHOAL_ERR_UNSUPPORTED,
     * having read nothing, when this endpoint cannot read it. */
    shoal_status_t (*get)(shoal_ep_t *ep, void *dst, const shoal_rmem_t *remote,
                          size_t remote_off, size_t len);

    void (*disconnect)(shoal_ep_t *ep);
    void (*close)(shoal_tl_ctx_t *ctx);
};

/* Shared stubs for transports without the capability. */
shoal_status_t shoal_tl_stub_ready(shoal_tl_ctx_t *ctx);
shoal_status_t shoal_tl_stub_sleep(shoal_tl_ctx_t *ctx, uint64_t waited_ns, uint64_t timeout_ns);
shoal_status_t shoal_tl_stub_mem_reg(shoal_tl_ctx_t *ctx, void *addr, size_t len,
                                     shoal_mem_kind_t kind, shoal_mem_t **mem_p);
shoal_status_t shoal_tl_stub_mem_dereg(shoal_tl_ctx_t *ctx, shoal_mem_t *mem);
shoal_status_t shoal_tl_stub_rkey_pack(shoal_tl_ctx_t *ctx, const shoal_mem_t *mem,
                                       const void *addr, size_t len, void *blob,
                                       size_t *len_p);
shoal_status_t shoal_tl_stub_rkey_attach(shoal_ep_t *ep, const void *blob, size_t len,
                                         const shoal_rmem_t **rmem_p);
shoal_status_t shoal_tl_stub_put_signal(shoal_ep_t *ep, const void *src,
                                        const shoal_mem_t *local, const shoal_rmem_t *remote,
                                        size_t remote_off, size_t len, const void *hdr);
shoal_status_t shoal_tl_stub_get(shoal_ep_t *ep, void *dst, const shoal_rmem_t *remote,
                                 size_t remote_off, size_t len);
shoal_status_t shoal_tl_stub_progress(shoal_tl_ctx_t *ctx);
/* flush for transports whose send_post already delivers (shm): SHOAL_OK. */
shoal_status_t shoal_tl_stub_flush(shoal_ep_t *ep);

/* Generic registration for transports that need no keys (shm, tcp): records
 * addr, len and kind in a malloc'd shoal_mem_t that mem_dereg frees. */
shoal_status_t shoal_tl_host_mem_reg(shoal_tl_ctx_t *ctx, void *addr, size_t len,
                                     shoal_mem_kind_t kind, shoal_mem_t **mem_p);
shoal_status_t shoal_tl_host_mem_dereg(shoal_tl_ctx_t *ctx, shoal_mem_t *mem);

/* tcp's slot rule (SHOAL_TCP_MEM): the slots per direction of the k-th
 * peer (k from 1) a rank connects, chunk bytes each, under a budget of mem
 * bytes (0: no budget) and at most nslots (SHOAL_TCP_NSLOTS):
 * min(nslots, mem / (2 x chunk x k)), at least 1. The simulator counts
 * memory with it. */
size_t shoal_tcp_slots_rule(size_t mem, size_t chunk, size_t nslots, size_t k);
/* For tests and introspection: peers whose tcp sockets are connected now
 * on ctx (a tcp context), its slot bytes (both directions) in use, and
 * the lazy dials it made again after the peer dropped their handshake. */
size_t shoal_tcp_peers_up(const shoal_tl_ctx_t *ctx);
size_t shoal_tcp_slot_bytes(const shoal_tl_ctx_t *ctx);
size_t shoal_tcp_redials(const shoal_tl_ctx_t *ctx);

extern const shoal_transport_ops_t shoal_shm_ops;
extern const shoal_transport_ops_t shoal_ib_ops;
extern const shoal_transport_ops_t shoal_tcp_ops;

/* The transports in order of preference (shared memory wherever it
 * reaches, RDMA verbs between hosts whose ports can, tcp elsewhere):
 * SHOAL_NTRANSPORTS of them. */
#define SHOAL_NTRANSPORTS 3
extern const shoal_transport_ops_t *const shoal_transports[SHOAL_NTRANSPORTS];

#endif
