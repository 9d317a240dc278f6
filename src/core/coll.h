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

/* An input the core prepares in the plan's own memory (args->stage_bytes
 * bytes; algo.h): fill writes it before the run; drain, when set, reads
 * the result back after a run that succeeded. ctx and n are theirs. */
typedef struct shoal_coll_staging {
    void (*fill)(const struct shoal_coll_staging *st, void *input);
    void (*drain)(const struct shoal_coll_staging *st, const void *input);
    struct shoal_comm *comm;
    const void *ctx;
    size_t n;
} shoal_coll_staging_t;

/* Plan and run algo for args (with staging when args->stage_bytes > 0),
 * and on failure shoal_coll_failed with "<what>: <algo> of <count> x
 * <dtype>". */
shoal_status_t shoal_coll_run(struct shoal_comm *comm, const shoal_algo_ops_t *algo,
                              const char *what, const shoal_coll_args_t *args,
                              const shoal_coll_staging_t *staging);

/* Sends and receives are about to move: their pieces carry the
 * point-to-point signature. */
void shoal_coll_begin_p2p(struct shoal_comm *comm);

#endif
