/* Shared pieces of the collective entry points. */
#ifndef SHOAL_COLL_H
#define SHOAL_COLL_H

#include "algos/algo.h"
#include "comm.h"

/* Checks of a collective's arguments on an entered comm (shoal_comm_enter):
 * known dtype and op, count * dtype size * nranks without overflow, and
 * non-NULL buffers when count > 0. The reason goes to comm's last error and
 * comm stays usable. */
shoal_status_t shoal_coll_check(struct shoal_comm *comm, const char *name, const void *sendbuf,
                                const void *recvbuf, size_t count, shoal_dtype_t dtype,
                                shoal_op_t op);

/* A run failed with s: make the failure sticky on comm (as
 * SHOAL_ERR_ABORTED when comm was aborted meanwhile), record "<what> failed
 * on rank R", and return the status to give the caller. */
shoal_status_t shoal_coll_failed(struct shoal_comm *comm, shoal_status_t s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Plan and run algo for args, and on failure shoal_coll_failed with "<what>:
 * <algo> of <count> x <dtype>". */
shoal_status_t shoal_coll_run(struct shoal_comm *comm, const shoal_algo_ops_t *algo,
                              const char *what, const shoal_coll_args_t *args);

/* All-reduce on an entered comm with checked args: the selected algorithm,
 * run as shoal_coll_run does (shoal_allreduce, and the barrier). */
shoal_status_t shoal_coll_allreduce(struct shoal_comm *comm, const char *what,
                                    const shoal_coll_args_t *args);

#endif
