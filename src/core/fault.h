/* Failures that involve other ranks: how they are found, described and
 * shared, so that every rank of a communicator returns an error naming the
 * rank at fault instead of waiting for its deadline.
 *
 * - A piece whose signature differs from the running operation's is a
 *   mismatch, described with both signatures.
 * - A rank that fails an operation (timeout, lost peer, mismatch) tells
 *   the others through the bootstrap star: rank 0 passes the notice on.
 * - A rank that dies closes its bootstrap connection without the goodbye
 *   that destroy sends: rank 0 sees it at once and tells the others; the
 *   others see rank 0's own death the same way. Idle connections carry
 *   TCP keepalive probes (SHOAL_HEARTBEAT), so a host that vanishes is
 *   noticed too.
 * - The executor polls for such news while it waits for data and, with
 *   the progress thread, every SHOAL_HEARTBEAT while the queue is empty. */
#ifndef SHOAL_FAULT_H
#define SHOAL_FAULT_H

#include "comm.h"

/* Record why the running operation fails (kept for its error message and
 * logged at debug level); the first cause of an operation wins. Executor
 * only. */
void shoal_fault_cause(struct shoal_comm *comm, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A piece from peer carried sig where comm->sig was due: records both as
 * the cause and returns SHOAL_ERR_MISMATCH. */
shoal_status_t shoal_fault_mismatch(struct shoal_comm *comm, int peer, const shoal_sig_t *sig);

/* Look for news of a failure elsewhere without waiting: SHOAL_OK if none,
 * else the status (the cause and comm's sticky error are set). Polls the
 * bootstrap at most every SHOAL_WATCH_INTERVAL unless force; any thread,
 * with comm entered or owned by its executor. */
shoal_status_t shoal_fault_watch(struct shoal_comm *comm, int force);

/* The running operation failed with status. A lost connection
 * (SHOAL_ERR_PEER) has a reason elsewhere: wait briefly for its news and
 * return the status that news gives (the cause then tells it), else
 * record a generic cause and return status unchanged. */
shoal_status_t shoal_fault_explain(struct shoal_comm *comm, shoal_status_t status);

/* The running operation failed here with status: tell the other ranks
 * (unless the failure came from them, or is this rank's own abort). */
void shoal_fault_report(struct shoal_comm *comm, shoal_status_t status);

/* Forget the cause before an operation starts. Executor only. */
void shoal_fault_reset(struct shoal_comm *comm);

#endif
