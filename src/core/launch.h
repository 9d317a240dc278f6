/* Forming a communicator from the launcher's environment
 * (shoal_comm_init_env). launch_env.c recognises the launchers and builds the
 * id from a known rendezvous address; launch_pmix.c lets a PMIx server carry
 * an id made by rank 0. */
#ifndef SHOAL_LAUNCH_H
#define SHOAL_LAUNCH_H

#include "shoal.h"

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

/* An id for a rendezvous address that every rank knows ("host:port", e.g.
 * from NCCL_COMM_ID): rank 0 binds that address itself; the secret is
 * SHOAL_SECRET's hash, else derived from the job's identity and the address
 * (weaker; logged). Every rank computes the same id. */
shoal_status_t shoal_launch_id_for(const char *hostport, shoal_unique_id_t *id_p);

#endif
