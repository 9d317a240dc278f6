/* Grow: the ranks of a communicator and new ones form a new communicator,
 * the old ranks keeping their numbers and the new ones appended.
 *
 * It works as shrink does (shrink.c). The id of comm's next grow is
 * computed alike by every rank of comm, without a word: the address of
 * rank 0's rendezvous listener, and the secret
 *
 *   HMAC-SHA256(comm's secret, "shoal-grow" || grow number || comm's size)
 *
 * (integers big-endian, 32 bits). Any rank may hand it out
 * (shoal_comm_grow_id); the new ranks join with it as with any unique id,
 * and comm's ranks with the id they derive, rank 0 accepting on its
 * rendezvous listener, which it lends to the bootstrap for the new
 * communicator's init. Only holders of the id can join: the bootstrap
 * authenticates every connection with its secret, which only comm's
 * members can derive. The grow number moves on at every grow, successful
 * or not, so an id serves once. comm itself is not touched: nothing
 * travels through it, and it stays usable. */
#include "comm.h"

#include "base/log.h"

#include <stdio.h>
#include <string.h>

static const char grow_label[] = "shoal-grow";

/* comm's next grow id; comm entered. */
static shoal_status_t grow_id(struct shoal_comm *comm, const char *what, shoal_unique_id_t *id)
{
    uint8_t msg[sizeof(grow_label) - 1 + 8];
    size_t label_len = sizeof(grow_label) - 1;
    memcpy(msg, grow_label, label_len);
    shoal_rdv_put_u32(msg + label_len, comm->ngrows);
    shoal_rdv_put_u32(msg + label_len + 4, (uint32_t)comm->team.nranks);
    uint8_t secret[SHOAL_SECRET_BYTES];
    shoal_status_t s = shoal_rdv_secret(comm, what, msg, sizeof(msg), secret);
    if (s == SHOAL_OK)
        s = shoal_bootstrap_id_make(&comm->rdv_addrs[0], secret, id);
    memset(secret, 0, sizeof(secret));
    if (s != SHOAL_OK)
        return shoal_comm_fail(comm, s, "%s: cannot make the grow's id", what);
    return SHOAL_OK;
}

shoal_status_t shoal_comm_grow_id(shoal_comm_t comm, shoal_unique_id_t *id_p)
{
    static const char what[] = "shoal_comm_grow_id";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    s = id_p ? grow_id(comm, what, id_p)
             : shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: id_p is NULL", what);
    shoal_comm_leave(comm);
    return s;
}

/* A new rank: an init with the id, under its own name in the log. */
static shoal_status_t grow_join(int nranks, const shoal_unique_id_t *id, int rank,
                                shoal_comm_t *newcomm_p)
{
    static const char what[] = "shoal_comm_grow";
    if (!id)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "%s: a new rank (comm NULL) needs the grow's id", what);
    if (!newcomm_p)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG, "%s: newcomm_p is NULL", what);
    if (nranks < 2 || rank < 1 || rank >= nranks)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "%s: rank %d of %d: a new rank takes a rank after the "
                               "communicator's, 1 .. nranks - 1", what, rank, nranks);
    shoal_status_t s = shoal_comm_init(nranks, id, rank, newcomm_p);
    if (s != SHOAL_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", shoal_comm_last_error(NULL));
        return shoal_comm_fail(NULL, s, "%s: new rank %d of %d could not join: %s", what, rank,
                               nranks, why);
    }
    shoal_info(INIT, "joined a grown communicator as rank %d of %d", rank, nranks);
    return SHOAL_OK;
}

shoal_status_t shoal_comm_grow(shoal_comm_t comm, int nranks, const shoal_unique_id_t *id,
                               int rank, shoal_comm_t *newcomm_p)
{
    static const char what[] = "shoal_comm_grow";
    if (!comm)
        return grow_join(nranks, id, rank, newcomm_p);
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    int oldrank = comm->team.rank, oldsize = comm->team.nranks;
    if (!newcomm_p)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: newcomm_p is NULL", what);
    else if (nranks <= oldsize)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                            "%s: nranks %d is not more than the communicator's %d", what,
                            nranks, oldsize);
    else if (rank != -1 && rank != oldrank)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                            "%s: rank %d: rank %d of the communicator keeps its rank (pass -1)",
                            what, rank, oldrank);
    if (s != SHOAL_OK) {
        shoal_comm_leave(comm);
        return s;
    }
    shoal_unique_id_t mine;
    s = grow_id(comm, what, &mine);
    comm->ngrows++;
    if (s == SHOAL_OK && id && memcmp(id, &mine, sizeof(mine)) != 0)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                            "%s: the id is not this communicator's next grow id (made by "
                            "another communicator, or for a grow that has happened)", what);
    if (s == SHOAL_OK && oldrank == 0 && (s = shoal_rdv_lead(comm, &mine)) != SHOAL_OK)
        shoal_comm_fail(comm, s, "%s: cannot set up the rendezvous of the new communicator",
                        what);
    if (s != SHOAL_OK) {
        shoal_comm_leave(comm);
        return s;
    }
    uint64_t serial = comm->serial;
    /* Forming the new communicator waits for the new ranks: comm is let
     * go first, so that an abort of it from another thread need not wait. */
    shoal_comm_leave(comm);
    shoal_comm_t newcomm;
    s = shoal_comm_init(nranks, &mine, oldrank, &newcomm);
    if (oldrank == 0) {
        if (s != SHOAL_OK)
            shoal_bootstrap_listener_withdraw(&mine);
        shoal_rdv_unlisten(comm, serial);
    }
    if (s != SHOAL_OK) {
        if (shoal_comm_reenter(comm, serial)) {
            char why[256];
            snprintf(why, sizeof(why), "%s", shoal_comm_last_error(NULL));
            shoal_comm_fail(comm, s, "%s: rank %d of %d: the grow to %d ranks failed: %s",
                            what, oldrank, oldsize, nranks, why);
            shoal_comm_leave(comm);
        }
        return s;
    }
    shoal_info(INIT, "rank %d of %d: grown to %d ranks", oldrank, oldsize, nranks);
    *newcomm_p = newcomm;
    return SHOAL_OK;
}
