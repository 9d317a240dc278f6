/* Bootstrap: rendezvous through the root named in the unique id, then a small
 * control network for all-gather, broadcast and barrier of control data.
 * Every connection proves the id's secret (auth.h). */
#ifndef SHOAL_BOOTSTRAP_H
#define SHOAL_BOOTSTRAP_H

#include "base/auth.h"
#include "shoal.h"
#include "base/sock.h"

typedef struct shoal_bootstrap shoal_bootstrap_t;

/* Create an id whose root listens in this process now (shoal_get_unique_id). */
shoal_status_t shoal_bootstrap_id_create(shoal_unique_id_t *id_p);

/* Build an id for a known root address and secret (launcher init, shrink).
 * Rank 0 will bind that address itself, unless a listener was offered for
 * the id (shoal_bootstrap_listener_offer). */
shoal_status_t shoal_bootstrap_id_make(const shoal_sockaddr_t *root,
                                       const uint8_t secret[SHOAL_SECRET_BYTES],
                                       shoal_unique_id_t *id_p);

/* Where an id's secret came from, which the id records beside a salt: an
 * id made from a passphrase or from the job's identity (launch_secret.c)
 * carries the salt its secret was derived with. A rank refused at join
 * says so, since ranks whose passphrase, job identity or size differ
 * derive different secrets. Ids of shoal_bootstrap_id_make alone (random
 * secrets, split, shrink) are SHOAL_SECRET_RANDOM with a zero salt. */
typedef enum {
    SHOAL_SECRET_RANDOM = 0,     /* random, or derived from a random parent */
    SHOAL_SECRET_PASSPHRASE = 1, /* scrypt of SHOAL_SECRET or SHOAL_SECRET_FILE */
    SHOAL_SECRET_JOB = 2,        /* the job's identity: computable by others */
} shoal_secret_origin_t;
#define SHOAL_SALT_BYTES 16
void shoal_bootstrap_id_set_origin(shoal_unique_id_t *id, shoal_secret_origin_t origin,
                                   const uint8_t salt[SHOAL_SALT_BYTES]);

/* A rendezvous listener for an id made with shoal_bootstrap_id_make: a
 * duplicate of the listening socket listen_fd is kept in this process's
 * table under id, and the next shoal_bootstrap_init of rank 0 with id in
 * this process accepts on it (and closes it) instead of binding the id's
 * address. The caller keeps listen_fd. Withdraw closes an offer that no
 * init took (nothing happens if one did). */
shoal_status_t shoal_bootstrap_listener_offer(const shoal_unique_id_t *id, int listen_fd);
void shoal_bootstrap_listener_withdraw(const shoal_unique_id_t *id);

/* An address in a fixed-size, byte-order-independent form, to carry in
 * control messages (the unique id holds one). Unpack fails with
 * SHOAL_ERR_INVALID_ARG (logged) on an unknown address family. */
#define SHOAL_BOOT_ADDR_BYTES 24
void shoal_bootstrap_addr_pack(const shoal_sockaddr_t *addr, uint8_t out[SHOAL_BOOT_ADDR_BYTES]);
shoal_status_t shoal_bootstrap_addr_unpack(const uint8_t in[SHOAL_BOOT_ADDR_BYTES],
                                           shoal_sockaddr_t *addr_p);

/* Join: all nranks ranks call this with the same id. Fails with
 * SHOAL_ERR_TIMEOUT if not all arrive within timeout_ns; every later call on
 * bs has the same limit, and a rank that disconnects gives SHOAL_ERR_PEER
 * naming it in the log. */
shoal_status_t shoal_bootstrap_init(const shoal_unique_id_t *id, int rank, int nranks,
                                    uint64_t timeout_ns, shoal_bootstrap_t **bs_p);

/* buf holds nranks blocks of len bytes; this rank's block is at rank*len.
 * On return every block is filled. */
shoal_status_t shoal_bootstrap_allgather(shoal_bootstrap_t *bs, void *buf, size_t len);
shoal_status_t shoal_bootstrap_bcast(shoal_bootstrap_t *bs, void *buf, size_t len, int root);
shoal_status_t shoal_bootstrap_barrier(shoal_bootstrap_t *bs);

/* The secret every data connection of this communicator must prove. */
const uint8_t *shoal_bootstrap_secret(const shoal_bootstrap_t *bs);

/* The local address used for bootstrap; transports listen on the same one. */
const shoal_sockaddr_t *shoal_bootstrap_local_addr(const shoal_bootstrap_t *bs);

/* Look, without waiting, for news of a failure elsewhere: a failure
 * notice (shoal_bootstrap_report), or a rank whose connection ended without
 * the goodbye that destroy sends (it died or aborted). SHOAL_OK if there is
 * none, or if another thread is using bs (its collective reads the news).
 * Otherwise the status, with *culprit_p the rank at fault (-1: unknown)
 * and text (cap > 0 bytes) the description; rank 0 passes the news on to
 * the others. bs then fails every later call with that status. Any thread. */
shoal_status_t shoal_bootstrap_poll(shoal_bootstrap_t *bs, int *culprit_p, char *text,
                                    size_t cap);

/* A failure found on this rank: tell the others (through rank 0), unless bs
 * failed already. Waits at most a second. Any thread. */
void shoal_bootstrap_report(shoal_bootstrap_t *bs, int culprit, shoal_status_t status,
                            const char *text);

/* Wake and fail every blocking call on bs (from any thread); idempotent. */
void shoal_bootstrap_abort(shoal_bootstrap_t *bs);

/* Say goodbye to the connected ranks (unless aborted) and free bs. */
void shoal_bootstrap_destroy(shoal_bootstrap_t *bs);

#endif
