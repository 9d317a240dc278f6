/* The communicator's transports: wireup at init, teardown at destroy
 * (wireup.c). */
#ifndef SHOAL_WIREUP_H
#define SHOAL_WIREUP_H

#include "comm.h"

/* Open every enabled transport, pick one per peer (first reachable in list
 * order), connect, and fill comm->team.eps. Collective over the
 * communicator. */
shoal_status_t shoal_transport_wireup(struct shoal_comm *comm);

/* Disconnect every endpoint and close every context. */
void shoal_transport_teardown(struct shoal_comm *comm);

#endif
