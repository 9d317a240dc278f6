/* Shrink: the ranks of a communicator that are not excluded form a new one,
 * ordered by their old rank, while the excluded ranks may be dead.
 *
 * Nothing travels through the parent. Its bootstrap star runs through rank
 * 0, which may be among the dead, and its data transports may hold half of
 * an aborted collective's bytes. Instead every rank opens a rendezvous
 * listener at init and tells the others its address in the init exchange
 * (comm.c). At a shrink the survivors agree on a new unique id without a
 * word: the address of the lowest survivor's listener, and the secret
 *
 *   HMAC-SHA256(parent secret, "shoal-shrink" || shrink number ||
 *               parent size || bitmap of the excluded ranks)
 *
 * (integers big-endian, 32 bits). The lowest survivor lends a duplicate of
 * its listener to the bootstrap's listener table under that id, so that
 * its shoal_comm_init as rank 0 accepts on it, and every survivor calls
 * shoal_comm_init with the id. A stranger on the listener is refused by the
 * authentication, as on any root's; survivors that disagree about the
 * excluded set derive different secrets and fail (SHOAL_ERR_AUTH or a
 * timeout) rather than form a wrong communicator. The secret never travels
 * and is known to the parent's members only.
 *
 * The cost at init is one listening socket per rank for the communicator's
 * life (socket, bind, listen: a few microseconds, one descriptor and one
 * port) and 24 bytes more per rank in the host-id all-gather, which exists
 * anyway: no extra round trip. */
#include "comm.h"

#include "exec.h"
#include "base/log.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char shoal_shrink_label[] = "shoal-shrink";

shoal_status_t shoal_shrink_listen(struct shoal_comm *comm,
                                   uint8_t packed[SHOAL_BOOT_ADDR_BYTES])
{
    /* The bootstrap's local address is the one this rank reaches rank 0
     * from, and the transports listen on it too: the other ranks reach it. */
    shoal_sockaddr_t addr = *shoal_bootstrap_local_addr(comm->bootstrap);
    shoal_sock_set_port(&addr, 0);
    /* Bound, not listening: the port is this rank's for a later shrink,
     * and a stranger's connection is refused at once instead of waiting in
     * a queue that nobody accepts from. It listens only while it leads a
     * shrink, when the new communicator's root accepts (and authenticates)
     * on it. */
    shoal_status_t s = shoal_sock_bind(&addr, &comm->rdv_fd);
    if (s != SHOAL_OK) {
        shoal_error(INIT, "rank %d: cannot open the rendezvous listener for shrink",
                    comm->team.rank);
        return s;
    }
    shoal_bootstrap_addr_pack(&addr, packed);
    return SHOAL_OK;
}

/* After leading a shrink or a grow: a listening socket cannot stop
 * listening, so the leader closes it (strangers queued on it are reset)
 * and binds the same port again for a later one. If the port is gone, a
 * later shrink or grow led by this rank fails with a clear message. */
void shoal_rdv_unlisten(struct shoal_comm *comm, uint64_t serial)
{
    if (!shoal_comm_reenter(comm, serial))
        return;
    if (comm->rdv_fd >= 0) {
        close(comm->rdv_fd);
        comm->rdv_fd = -1;
        shoal_sockaddr_t addr = comm->rdv_addrs[comm->team.rank];
        if (shoal_sock_bind(&addr, &comm->rdv_fd) != SHOAL_OK) {
            comm->rdv_fd = -1;
            shoal_warn(INIT, "rank %d: cannot bind the rendezvous port again; a later shrink "
                       "or grow that this rank would lead will fail", comm->team.rank);
        }
    }
    shoal_comm_leave(comm);
}

shoal_status_t shoal_rdv_lead(struct shoal_comm *comm, const shoal_unique_id_t *id)
{
    if (comm->rdv_fd < 0 || listen(comm->rdv_fd, SOMAXCONN) != 0) {
        shoal_error(INIT, "rank %d: cannot listen on the rendezvous socket: %s",
                    comm->team.rank, comm->rdv_fd < 0 ? "lost after an earlier shrink or grow"
                                                 : strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    return shoal_bootstrap_listener_offer(id, comm->rdv_fd);
}

shoal_status_t shoal_rdv_secret(struct shoal_comm *comm, const char *what, const uint8_t *msg,
                                size_t len, uint8_t secret[SHOAL_SECRET_BYTES])
{
    unsigned mac_len = 0;
    if (!HMAC(EVP_sha256(), shoal_bootstrap_secret(comm->bootstrap), SHOAL_SECRET_BYTES, msg,
              len, secret, &mac_len) || mac_len != SHOAL_SECRET_BYTES)
        return shoal_comm_fail(comm, SHOAL_ERR_SYSTEM, "%s: HMAC-SHA256: %s", what,
                               ERR_reason_error_string(ERR_get_error()));
    return SHOAL_OK;
}

void shoal_rdv_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The new communicator's secret (see the top of this file). */
static shoal_status_t shrink_secret(struct shoal_comm *comm, const unsigned char *excluded,
                                    uint8_t secret[SHOAL_SECRET_BYTES])
{
    size_t label_len = sizeof(shoal_shrink_label) - 1;
    size_t map_len = ((size_t)comm->team.nranks + 7) / 8;
    size_t len = label_len + 8 + map_len;
    uint8_t *msg = calloc(1, len);
    if (!msg)
        return shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "shoal_comm_shrink: out of memory");
    memcpy(msg, shoal_shrink_label, label_len);
    shoal_rdv_put_u32(msg + label_len, comm->nshrinks);
    shoal_rdv_put_u32(msg + label_len + 4, (uint32_t)comm->team.nranks);
    uint8_t *map = msg + label_len + 8;
    for (int r = 0; r < comm->team.nranks; r++) {
        if (excluded[r])
            map[r / 8] |= (uint8_t)(0x80u >> (r % 8));
    }
    shoal_status_t s = shoal_rdv_secret(comm, "shoal_comm_shrink", msg, len, secret);
    free(msg);
    return s;
}

/* The arguments, checked before anything changes; fills excluded[r]. */
static shoal_status_t shrink_check(struct shoal_comm *comm, const int *exclude, int nexclude,
                                   int flags, shoal_comm_t *newcomm_p, unsigned char *excluded)
{
    static const char what[] = "shoal_comm_shrink";
    int n = comm->team.nranks;
    if (!newcomm_p)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: newcomm_p is NULL", what);
    if (flags != SHOAL_SHRINK_DEFAULT && flags != SHOAL_SHRINK_ABORT)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: flags %d is neither SHOAL_SHRINK_DEFAULT nor "
                               "SHOAL_SHRINK_ABORT", what, flags);
    if (nexclude < 0 || (nexclude > 0 && !exclude))
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               nexclude < 0 ? "%s: nexclude %d is negative"
                                            : "%s: exclude is NULL with nexclude %d",
                               what, nexclude);
    for (int i = 0; i < nexclude; i++) {
        int r = exclude[i];
        if (r < 0 || r >= n)
            return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                                   "%s: exclude[%d] = %d is out of range 0..%d", what, i, r,
                                   n - 1);
        if (excluded[r])
            return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                                   "%s: exclude[%d] = %d is listed twice", what, i, r);
        excluded[r] = 1;
    }
    if (nexclude == n)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: all %d ranks are excluded", what, n);
    if (excluded[comm->team.rank])
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: rank %d is in exclude (excluded ranks do not call it)",
                               what, comm->team.rank);
    return SHOAL_OK;
}

/* What shoal_comm_abort does to comm's operations, short of freeing comm;
 * the caller holds comm entered. Queued operations, blocking or not, fail
 * with SHOAL_ERR_ABORTED at once; calls in flight on other threads see the
 * flag at their next poll (a split's init too: base/cancel.h) or their
 * bootstrap socket shut down. They are waited for no longer than comm's
 * deadline; then the queue is torn down. Later calls are refused by
 * shoal_comm_enter, and destroy and abort find nothing left to wait for.
 * SHOAL_ERR_TIMEOUT (logged) if calls were still inside at the deadline:
 * the queue stays for them, and destroy or abort deal with it. */
static shoal_status_t shrink_stop_entered(struct shoal_comm *comm, const char *what)
{
    atomic_store_explicit(&comm->team.aborted, 1, memory_order_release);
    shoal_bootstrap_abort(comm->bootstrap);
    shoal_exec_stop(comm);
    shoal_status_t s = shoal_comm_wait_calls(comm, 1, what); /* not this call */
    if (s == SHOAL_OK)
        shoal_exec_destroy(comm, 0);
    return s;
}

shoal_status_t shoal_comm_stop(struct shoal_comm *comm)
{
    static const char what[] = "shoal_comm_stop";
    shoal_status_t s = shoal_comm_enter_any(comm, what);
    if (s != SHOAL_OK)
        return s;
    s = shrink_stop_entered(comm, what);
    if (s != SHOAL_OK)
        shoal_comm_fail(comm, s, "%s: calls on other threads are still inside the "
                        "communicator; it is stopped, and destroy or abort wait for them "
                        "again", what);
    shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_comm_shrink(shoal_comm_t comm, const int *exclude, int nexclude, int flags,
                                 shoal_comm_t *newcomm_p)
{
    static const char what[] = "shoal_comm_shrink";
    /* A broken or aborted parent is what shrink is for: only its being
     * live matters. */
    shoal_status_t s = shoal_comm_enter_any(comm, what);
    if (s != SHOAL_OK)
        return s;
    unsigned char *excluded = calloc((size_t)comm->team.nranks, 1);
    if (!excluded) {
        s = shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: out of memory", what);
        goto err_leave;
    }
    s = shrink_check(comm, exclude, nexclude, flags, newcomm_p, excluded);
    if (s != SHOAL_OK)
        goto err_free_excluded;
    /* A call that outlived the deadline of the stop holds only comm: the
     * new communicator does not need it, so the shrink goes on. */
    if (flags == SHOAL_SHRINK_ABORT && shrink_stop_entered(comm, what) != SHOAL_OK)
        shoal_warn(INIT, "rank %d: %s: the parent is stopped, but calls on it are still "
                   "in flight; shrinking all the same", comm->team.rank, what);

    int leader = -1, newrank = 0, newsize = comm->team.nranks - nexclude;
    for (int r = 0; r < comm->team.nranks; r++) {
        if (excluded[r])
            continue;
        if (leader < 0)
            leader = r;
        newrank += r < comm->team.rank;
    }
    uint8_t secret[SHOAL_SECRET_BYTES];
    s = shrink_secret(comm, excluded, secret);
    comm->nshrinks++;
    if (s != SHOAL_OK)
        goto err_free_excluded;
    shoal_unique_id_t id;
    s = shoal_bootstrap_id_make(&comm->rdv_addrs[leader], secret, &id);
    if (s == SHOAL_OK && leader == comm->team.rank)
        s = shoal_rdv_lead(comm, &id);
    if (s != SHOAL_OK) {
        shoal_comm_fail(comm, s, "%s: cannot set up the rendezvous of the new communicator",
                        what);
        goto err_free_excluded;
    }
    int oldrank = comm->team.rank, oldsize = comm->team.nranks;
    uint64_t serial = comm->serial;
    free(excluded);
    /* Forming the new communicator waits for its peers: comm is let go
     * first, so that an abort of it from another thread need not wait. */
    shoal_comm_leave(comm);

    shoal_comm_t newcomm;
    s = shoal_comm_init(newsize, &id, newrank, &newcomm);
    if (leader == oldrank) {
        if (s != SHOAL_OK)
            shoal_bootstrap_listener_withdraw(&id);
        shoal_rdv_unlisten(comm, serial);
    }
    if (s != SHOAL_OK) {
        if (shoal_comm_reenter(comm, serial)) {
            shoal_comm_fail(comm, s, "%s: rank %d of %d: the %d survivors did not form a "
                            "communicator: %s", what, oldrank, oldsize, newsize,
                            shoal_comm_last_error(NULL));
            shoal_comm_leave(comm);
        }
        return s;
    }
    shoal_info(INIT, "rank %d of %d: shrunk to rank %d of %d (%d excluded%s)", oldrank, oldsize,
               newrank, newsize, nexclude, flags == SHOAL_SHRINK_ABORT ? ", parent stopped" : "");
    *newcomm_p = newcomm;
    return SHOAL_OK;

err_free_excluded:
    free(excluded);
err_leave:
    shoal_comm_leave(comm);
    return s;
}
