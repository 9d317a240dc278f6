/* Stream-ordered calls: a collective or send/receive whose buffers may be
 * device memory and whose completion is ordered with a CUDA stream, as
 * NCCL's calls are. The staged path: on the caller's thread the call's
 * stream side is queued on its stream at once (the device input copied to
 * a pinned host slot, a flag raised; then a wait for the host's flag, the
 * result copied back, a flag that frees the slot), and the host side is
 * the ordinary call on the slot, queued for the progress thread. The host
 * side starts when the stream raised the slot's ready flag and raises the
 * done flag when it ends, whatever its outcome, so a stream never waits
 * for a call that failed or was aborted. No host thread ever blocks on the
 * stream. */
#ifndef SHOAL_DEV_STAGE_H
#define SHOAL_DEV_STAGE_H

#include "exec.h"

/* Queue the stream side of every on_stream call of calls[0..ncalls) and
 * point its args at host memory (the slot, or the caller's buffer where
 * the host can reach it). Calls without on_stream are left alone. On
 * failure the calls queued so far are released (their done flags raised)
 * and the reason is comm's last error. */
shoal_status_t shoal_dev_stage(struct shoal_comm *comm, shoal_call_t *calls, size_t ncalls);

/* A checked stream-ordered call outside a group, on an entered comm:
 * stage it and queue its host side; returns at once. */
shoal_status_t shoal_call_enqueue(struct shoal_comm *comm, shoal_call_t *call);

/* Whether every call of calls[0..ncalls) is stream-ordered: the task is
 * then never waited for on the host. */
int shoal_dev_calls_all(const shoal_call_t *calls, size_t ncalls);
/* On a communicator of one rank, stream-ordered calls whose result is
 * their input (every collective kind the direct path serves, with a plain
 * op, on buffers that are not pageable host memory) are one copy each on
 * their streams, queued here with nothing for the host to do: 1 and *s_p
 * set when every one of calls is such, 0 (nothing done) otherwise. */
int shoal_dev_one_rank(struct shoal_comm *comm, const shoal_call_t *calls, size_t ncalls,
                       shoal_status_t *s_p);

/* The host side's start: wait for each staged call's ready flag (the
 * stream reached the call). Returns SHOAL_ERR_ABORTED if comm is aborted
 * meanwhile. */
shoal_status_t shoal_dev_task_start(struct shoal_comm *comm, const shoal_call_t *calls,
                                    size_t ncalls);
/* The host side's end, run or not: raise each staged call's done flag. */
void shoal_dev_task_end(const shoal_call_t *calls, size_t ncalls);

/* comm's slots, once its executor is gone: each is freed when its stream
 * has passed it (waiting up to comm's timeout); one a stream has not
 * passed by then is left allocated, since the device may still write it. */
void shoal_dev_comm_destroy(struct shoal_comm *comm);
/* Free comm's staging (pinned slots, the direct path's scratch and
 * stream) now, on an idle comm, to be made again by the next
 * stream-ordered call: SHOAL_INPROGRESS, freeing nothing, while a stream
 * has not passed a staged call yet. */
shoal_status_t shoal_dev_comm_release(struct shoal_comm *comm);
/* Whether a stream has yet to pass a staged call of comm. */
int shoal_dev_comm_pending(struct shoal_comm *comm);
/* Device memory comm's staging holds (the direct path's scratch). */
size_t shoal_dev_comm_device_bytes(struct shoal_comm *comm);

#endif
