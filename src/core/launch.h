/* Forming a communicator from the launcher's environment
 * (shoal_comm_init_env). launch_env.c recognises the launchers and builds the
 * id from a known rendezvous address; launch_pmix.c lets a PMIx server carry
 * an id made by rank 0. */
#ifndef SHOAL_LAUNCH_H
#define SHOAL_LAUNCH_H

#include "shoal.h"
#include "base/sock.h"

/* Whether the environment names a PMIx server (PMIX_NAMESPACE or PMIX_RANK). */
int shoal_launch_pmix_present(void);

/*
 * Form a communicator of the PMIx job: rank and size come from PMIx, rank 0
 * creates an id with shoal_get_unique_id and publishes it, the others fetch
 * it after a fence. PMIx is finalized once the id has been exchanged, before
 * shoal_comm_init, so the communicator does not depend on the PMIx server
 * afterwards.
 * Returns SHOAL_ERR_UNSUPPORTED (logged as a warning) when PMIx_Init fails,
 * so the caller may try the other launchers; SHOAL_ERR_SYSTEM when the
 * exchange fails; otherwise the codes of shoal_comm_init.
 */
shoal_status_t shoal_launch_pmix_init(shoal_comm_t *comm_p);

/* A job whose ranks each build the same id (launch_secret.c). */
typedef struct {
    const char *launcher;         /* for messages: "torchrun", "NCCL_COMM_ID"... */
    int rank;                     /* -1: not known yet */
    int size;                     /* -1: not known yet (left out of the identity) */
    const shoal_sockaddr_t *root; /* rendezvous address of rank 0 */
} shoal_launch_job_t;

/* The id of such a job: root's address and a secret from SHOAL_SECRET_FILE
 * or SHOAL_SECRET (scrypt, salted with the job's identity), or, where
 * SHOAL_AUTH allows it, from the job's identity alone (warned on rank 0
 * under SHOAL_AUTH=warn). Fails with SHOAL_ERR_AUTH under SHOAL_AUTH=strict
 * when no passphrase is set, or when the secret file may be read or
 * written by others; SHOAL_ERR_INVALID_ARG when both are set, or the file
 * is missing, empty or too long. Logged, with what to do. */
shoal_status_t shoal_launch_make_id(const shoal_launch_job_t *job, shoal_unique_id_t *id_p);

/* An id for a rendezvous address that every rank knows ("host:port", e.g.
 * from NCCL_COMM_ID): rank 0 binds that address itself; the secret as for
 * shoal_launch_make_id, with the size left out. Every rank computes the
 * same id. */
shoal_status_t shoal_launch_id_for(const char *hostport, shoal_unique_id_t *id_p);

#endif
