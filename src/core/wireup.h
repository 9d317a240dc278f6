/* The communicator's transports: wireup at init, teardown at destroy
 * (wireup.c). */
#ifndef SHOAL_WIREUP_H
#define SHOAL_WIREUP_H

#include "comm.h"

/* Open every enabled transport, pick one per peer (first reachable in list
 * order), connect, and fill comm->team.eps. Collective over the
 * communicator. */
shoal_status_t shoal_transport_wireup(struct shoal_comm *comm);

/* For tests only: sleep steps times SHOAL_TEST_WIREUP_DELAY (by default 0,
 * no sleep). Init calls it before a rank joins the bootstrap and before it
 * connects its transports, so that a test can reach the listeners of init
 * while they are open and served. */
void shoal_wireup_test_delay(int steps);

/* Disconnect every endpoint and close every context. */
void shoal_transport_teardown(struct shoal_comm *comm);

#endif
