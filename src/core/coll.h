/* Running one algorithm for one call, and the failure path shared by every
 * collective. */
#ifndef SHOAL_COLL_H
#define SHOAL_COLL_H

#include "algos/algo.h"
#include "comm.h"

/* A run failed with s: make the failure sticky on comm (as
 * SHOAL_ERR_ABORTED when comm was aborted meanwhile), tell the other ranks
 * (fault.h), record "<what> failed on rank R: <cause>", and return the
 * status to give the caller. */
shoal_status_t shoal_coll_failed(struct shoal_comm *comm, shoal_status_t s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Plan and run algo for args, and on failure shoal_coll_failed with "<what>:
 * <algo> of <count> x <dtype>". */
shoal_status_t shoal_coll_run(struct shoal_comm *comm, const shoal_algo_ops_t *algo,
                              const char *what, const shoal_coll_args_t *args);

/* Sends and receives are about to move: their pieces carry the
 * point-to-point signature. */
void shoal_coll_begin_p2p(struct shoal_comm *comm);

#endif
