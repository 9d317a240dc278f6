/* Wireup: open each transport, exchange address blobs over the bootstrap
 * network, and connect every peer through the first transport in list
 * order (transport/registry.c) that both ends have open and that reaches
 * it.
 * This file is the one place where the communicator meets the transports:
 * it hands them the narrow shoal_tl_params_t built from it. */
#include "wireup.h"

#include "comm.h"
#include "reg.h"
#include "algos/algo.h"
#include "algos/prims.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NTRANSPORTS ((size_t)SHOAL_NTRANSPORTS) /* transport/registry.c */

_Static_assert(NTRANSPORTS <= SHOAL_MAX_TRANSPORTS, "raise SHOAL_MAX_TRANSPORTS");
/* The header the transports carry is the operation signature. */
_Static_assert(sizeof(shoal_sig_t) == SHOAL_TL_HDR_BYTES, "signatures fill the header");
_Static_assert(SHOAL_TAG_BYTES == SHOAL_TL_TAG_BYTES, "tags travel whole");

static const shoal_sockaddr_t *wireup_local_addr(const void *handle)
{
    return shoal_bootstrap_local_addr(handle);
}

static const uint8_t *wireup_secret(const void *handle)
{
    return shoal_bootstrap_secret(handle);
}

/* What the transports may know of comm; the arrays and the bootstrap
 * live as long as comm. */
static void wireup_params(struct shoal_comm *comm, shoal_tl_params_t *par)
{
    *par = (shoal_tl_params_t){
        .rank = comm->team.rank,
        .nranks = comm->team.nranks,
        .chunk_size = comm->team.chunk_size,
        .host_of = comm->host_of,
        .pids = comm->pids,
        .tags = (const uint8_t(*)[SHOAL_TL_TAG_BYTES])comm->tags,
        .boot = {.handle = comm->bootstrap,
                 .local_addr = wireup_local_addr,
                 .secret = wireup_secret},
        .timeout_ns = comm->team.timeout_ns,
    };
    shoal_place_nic_name(comm->team.cluster.place[comm->team.rank].nic, par->nic,
                         sizeof(par->nic));
    par->host_cpus = shoal_place_cpus();
}

typedef struct {
    uint32_t len; /* 0: the transport is not open on that rank */
    unsigned char blob[SHOAL_TL_ADDR_MAX];
} tl_addr_t;

/* Open transport t (or leave it closed) and gather every rank's blob. */
static shoal_status_t wireup_exchange(struct shoal_comm *comm, const shoal_tl_params_t *par,
                                      size_t t, tl_addr_t *addrs)
{
    const shoal_transport_ops_t *ops = shoal_transports[t];
    tl_addr_t *mine = &addrs[comm->team.rank];
    memset(mine, 0, sizeof(*mine));
    shoal_tl_ctx_t *ctx = NULL;
    shoal_status_t s = ops->open(par, &ctx);
    if (s == SHOAL_OK) {
        size_t len = SHOAL_TL_ADDR_MAX;
        s = ops->addr_pack(ctx, mine->blob, &len);
        if (s != SHOAL_OK || len == 0 || len > SHOAL_TL_ADDR_MAX) {
            shoal_error(INIT, "transport %s: cannot pack its address", ops->name);
            ops->close(ctx);
            return s != SHOAL_OK ? s : SHOAL_ERR_INTERNAL;
        }
        mine->len = (uint32_t)len;
        comm->team.tl_ctx[t] = ctx;
    } else if (s == SHOAL_ERR_UNSUPPORTED) {
        shoal_debug(INIT, "transport %s not in use on rank %d", ops->name, comm->team.rank);
    } else {
        return s;
    }
    return shoal_bootstrap_allgather(comm->bootstrap, addrs, sizeof(*addrs));
}

static shoal_status_t wireup_peer(struct shoal_comm *comm, const shoal_tl_params_t *par,
                                  int peer, tl_addr_t *const *addrs, uint64_t deadline)
{
    for (size_t t = 0; t < NTRANSPORTS; t++) {
        const tl_addr_t *theirs = &addrs[t][peer];
        if (!comm->team.tl_ctx[t] || theirs->len == 0)
            continue;
        shoal_tl_caps_t caps = {0};
        shoal_status_t s = shoal_transports[t]->query(par, peer, &caps);
        if (s != SHOAL_OK)
            return s;
        if (!caps.reachable)
            continue;
        s = shoal_transports[t]->connect(comm->team.tl_ctx[t], peer, theirs->blob, theirs->len, deadline,
                                   &comm->team.eps[peer]);
        /* Both ends see both blobs, so both turn away from a transport
         * whose two ends cannot meet (ib ports of two link layers) alike. */
        if (s == SHOAL_ERR_UNSUPPORTED)
            continue;
        if (s != SHOAL_OK)
            return s;
        shoal_debug(INIT, "rank %d -> %d over %s", comm->team.rank, peer, shoal_transports[t]->name);
        return SHOAL_OK;
    }
    shoal_error(INIT, "rank %d: no transport reaches rank %d (host %s): ib needs an active "
                "RDMA port on both hosts (SHOAL_DEBUG=info says why it is unavailable), tcp "
                "SHOAL_TCP_ENABLE=y", comm->team.rank, peer, comm->host_ids[peer]);
    return SHOAL_ERR_UNSUPPORTED;
}

void shoal_wireup_test_delay(int steps)
{
    uint64_t ns = shoal_config_get()->core.test_wireup_delay_ns * (uint64_t)(steps > 0 ? steps : 0);
    if (ns == 0)
        return;
    shoal_debug(INIT, "SHOAL_TEST_WIREUP_DELAY: waiting %.3f s", (double)ns * 1e-9);
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* CLOCK_REALTIME in seconds: what ranks of one machine, in network
 * namespaces or not, can compare (tools/netns_init.sh does). */
static double wireup_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

shoal_status_t shoal_transport_wireup(struct shoal_comm *comm)
{
    double wall0 = wireup_wall_s();
    tl_addr_t *addrs[NTRANSPORTS] = {0};
    shoal_status_t s = SHOAL_OK;
    shoal_tl_params_t par;
    wireup_params(comm, &par);
    for (size_t t = 0; t < NTRANSPORTS && s == SHOAL_OK; t++) {
        addrs[t] = calloc((size_t)comm->team.nranks, sizeof(tl_addr_t));
        s = addrs[t] ? wireup_exchange(comm, &par, t, addrs[t]) : SHOAL_ERR_NO_MEMORY;
    }
    comm->team.ntl = (int)NTRANSPORTS;
    /* Every listener is open now. With the test delay, rank r connects r
     * delays later: rank p < r waits in its acceptor for r meanwhile, so
     * every rank but the last serves its listener for at least one delay. */
    if (s == SHOAL_OK)
        shoal_wireup_test_delay(comm->team.rank);
    uint64_t deadline = shoal_deadline_after(comm->team.timeout_ns);
    for (int peer = 0; peer < comm->team.nranks && s == SHOAL_OK; peer++) {
        if (peer != comm->team.rank)
            s = wireup_peer(comm, &par, peer, addrs, deadline);
    }
    if (s == SHOAL_OK)
        s = shoal_bootstrap_barrier(comm->bootstrap);
    comm->team.tl_sole = NULL;
    for (int peer = 0; peer < comm->team.nranks && s == SHOAL_OK; peer++) {
        shoal_tl_ctx_t *ctx = comm->team.eps[peer] ? comm->team.eps[peer]->ctx : NULL;
        if (ctx && comm->team.tl_sole && ctx != comm->team.tl_sole) {
            comm->team.tl_sole = NULL;
            break;
        }
        if (ctx)
            comm->team.tl_sole = ctx;
    }
    comm->team.yield_after_ns = shoal_prims_yield_after(shoal_tl_crowded(&par));
    for (size_t t = 0; t < NTRANSPORTS && s == SHOAL_OK; t++) {
        if (comm->team.tl_ctx[t])
            s = shoal_transports[t]->ready(comm->team.tl_ctx[t]);
    }
    /* A transport that measured the pieces (shm, when it joins every rank
     * and SHOAL_CHUNK_SIZE is unset) gave every rank the same answer. */
    for (size_t t = 0; t < NTRANSPORTS && s == SHOAL_OK; t++) {
        if (comm->team.tl_ctx[t] && comm->team.tl_ctx[t]->piece)
            comm->team.chunk_size = comm->team.tl_ctx[t]->piece;
    }
    for (size_t t = 0; t < NTRANSPORTS; t++)
        free(addrs[t]);
    if (s == SHOAL_OK) {
        double wall1 = wireup_wall_s();
        shoal_info(INIT, "rank %d: transports wired up in %.3f ms (wall clock %.6f to %.6f s)",
                   comm->team.rank, (wall1 - wall0) * 1e3, wall0, wall1);
        shoal_info(INIT, "rank %d: waits poll %.1f us before they yield the core", comm->team.rank,
                   (double)comm->team.yield_after_ns * 1e-3);
    }
    return s;
}

void shoal_transport_teardown(struct shoal_comm *comm)
{
    /* Plans and registrations hold memory-domain state of the contexts
     * closed here. */
    shoal_plan_cache_release(&comm->team);
    shoal_reg_drop_domains(comm);
    comm->team.tl_sole = NULL;
    for (int peer = 0; comm->team.eps && peer < comm->team.nranks; peer++) {
        if (comm->team.eps[peer]) {
            comm->team.eps[peer]->ops->disconnect(comm->team.eps[peer]);
            comm->team.eps[peer] = NULL;
        }
    }
    for (size_t t = 0; t < NTRANSPORTS; t++) {
        if (comm->team.tl_ctx[t]) {
            comm->team.tl_ctx[t]->ops->close(comm->team.tl_ctx[t]);
            comm->team.tl_ctx[t] = NULL;
        }
    }
}
