/* Operations and their execution: every collective and point-to-point call
 * becomes a call record; a task holds one call, or the calls of a group;
 * tasks of a communicator run one at a time, in issue order, on the
 * communicator's progress thread or on a caller's thread (a blocking call,
 * shoal_wait, or shoal_test with SHOAL_PROGRESS=caller).
 *
 * Each communicator's executor has a lock of its own, held only to queue,
 * dequeue and complete, never while data moves; a completion wakes only the
 * waiters of that communicator. Requests are checked by a magic, not looked
 * up under a lock (handle.h). */
#ifndef SHOAL_EXEC_H
#define SHOAL_EXEC_H

#include "algos/algo.h"
#include "comm.h"

struct shoal_call;
struct shoal_dev_ops;

/* A call's own stream side on the staged path (dev_stage.c), in place of
 * the plain copies between its buffers and the pinned slot: need gives
 * the slot's payload bytes; pre queues on the call's stream what comes
 * before the host side (it may write the payload), post what comes after
 * the host side's done flag (it may read the payload), and points the
 * call's args where the host side (call->run) finds its data. Called on
 * the issuing thread, in the order of the calls' streams. */
typedef struct shoal_dev_stager {
    size_t (*need)(const struct shoal_call *call);
    shoal_status_t (*pre)(const struct shoal_dev_ops *ops, const struct shoal_call *call,
                          unsigned char *payload);
    shoal_status_t (*post)(const struct shoal_dev_ops *ops, struct shoal_call *call,
                           unsigned char *payload);
} shoal_dev_stager_t;

/* What a one-sided call (core/rma.h) carries beside args (the put's
 * source, size and peer: sendbuf, count bytes of UINT8, root): its kind
 * (SHOAL_RMA_*; 0 for every other call), the put's window and offset, and
 * the wait's peers with the signals each must bring (distinct peers; a
 * wait for more is issued as several calls, which wait alike). */
#define SHOAL_RMA_WAIT_INLINE 8
typedef struct {
    int kind;
    struct shoal_win *win;
    uint32_t win_id; /* the window's id, in case win's memory holds another by then */
    size_t off;
    int nwaits;
    int wait_peer[SHOAL_RMA_WAIT_INLINE];
    uint64_t wait_count[SHOAL_RMA_WAIT_INLINE];
} shoal_rma_call_t;

/* One recorded call. */
typedef struct shoal_call {
    shoal_coll_args_t args;
    const char *what;          /* public name of the call, for messages */
    int barrier;               /* a barrier: args carry no buffers */
    int premul;                /* args.op was a pre-multiplied sum of... */
    shoal_dtype_t premul_dtype;
    unsigned char scalar[8];   /* ...this scalar (args.op is then SHOAL_SUM), */
    const void *scalar_ref;    /* or the one read here when the call runs */
    /* A compressed all-reduce through a compressor (api/compressor.h): it
     * runs as several calls of its own, through run, which the API layer
     * sets (the executor calls it instead of a schedule, without knowing
     * compressors); info is filled in on success. */
    struct shoal_compressor *comp;
    shoal_status_t (*run)(struct shoal_comm *comm, const struct shoal_call *call);
    shoal_compress_info_t *info;
    /* The signature kind when not the call's own (0): a compressor's inner
     * full-precision all-reduces carry SHOAL_SIG_COMPRESSOR. */
    unsigned sig_kind;
    /* Bytes this rank reads from sendbuf and writes to recvbuf (from
     * shoal_call_check). */
    size_t in_bytes, out_bytes;
    /* A stream-ordered call (dev_stage.h): on_stream is set by the stream
     * forms and the NCCL door, with the caller's stream (NULL: the legacy
     * default stream); slot and seq once its stream side is queued, when
     * args point at host memory. */
    int on_stream;
    void *stream;
    struct shoal_dev_slot *slot;
    uint32_t seq;
    /* NULL: the plain copies. A compressor's stream-ordered call sets its
     * own, with the compressor's step as of the call. */
    const shoal_dev_stager_t *stager;
    uint64_t comp_step;
    /* Called once the call is over, run or not (NULL: nothing to do),
     * before its completion shows: what the issuer reserved for it (a
     * compressor's busy ticket, comp_ticket) is released even where the
     * call never ran. */
    void (*end)(const struct shoal_call *call);
    uint64_t comp_ticket;
    shoal_rma_call_t rma;
} shoal_call_t;

/* Every call's end, for calls[0..n) that are over (exec.c). */
void shoal_calls_end(const shoal_call_t *calls, size_t n);

/* The scalar of a pre-multiplied call, as of now. */
static inline const void *shoal_call_scalar(const shoal_call_t *call)
{
    return call->scalar_ref ? call->scalar_ref : call->scalar;
}

typedef struct shoal_task shoal_task_t;

/* Per-communicator queue and progress thread. */
shoal_status_t shoal_exec_create(struct shoal_comm *comm);
/* Whether comm's tasks run on its progress thread (SHOAL_PROGRESS=thread),
 * so that a task nobody waits for still runs. */
int shoal_exec_threaded(const struct shoal_comm *comm);
/* Set that (shoal_comm_set_progress): 0, or -1 changing nothing when the
 * progress thread has started or a task is queued or running. */
int shoal_exec_set_threaded(struct shoal_comm *comm, int threaded);
/* Run (drain = 1: destroy) or fail with SHOAL_ERR_ABORTED (drain = 0: abort)
 * every queued task, stop the progress thread, let go of the queue (freed
 * with the last task that a request still holds). Requests stay valid for
 * their owners. Returns the first failure of a drained task. */
shoal_status_t shoal_exec_destroy(struct shoal_comm *comm, int drain);

/* After comm's abort flag was set: fail every queued task with
 * SHOAL_ERR_ABORTED (and the p2p session's messages, if nobody is running
 * it), wake every thread waiting on comm's tasks and the progress thread.
 * A task being run ends at its next poll of the flag. Any thread; returns
 * at once. */
void shoal_exec_stop(struct shoal_comm *comm);

/* Queue calls[0..ncalls) (copied) as one task on an entered comm and wait
 * for it: returns its status. */
shoal_status_t shoal_exec_run(struct shoal_comm *comm, const shoal_call_t *calls, size_t ncalls);

/* Queue calls[0..ncalls) as one task on an entered comm, complete
 * reqs[0..nreqs) with it, and return at once. The calls are copied, except
 * with task_p: the caller then holds the task until shoal_exec_wait and
 * keeps calls valid until then. */
shoal_status_t shoal_exec_submit(struct shoal_comm *comm, const shoal_call_t *calls,
                                 size_t ncalls, shoal_request_t *reqs, size_t nreqs,
                                 shoal_task_t **task_p);
/* Wait for a task held from shoal_exec_submit, let go of it, return its status. */
shoal_status_t shoal_exec_wait(shoal_task_t *task);

/* A new request, pending until a task is bound to it by shoal_exec_submit
 * or it is completed by shoal_request_complete. */
shoal_status_t shoal_request_new(shoal_request_t *req_p);
void shoal_request_complete(shoal_request_t req, shoal_status_t status);

/* Enter comm, check call, then record it in the thread's group, queue it
 * (nb: with a new request at *req_p) or run it and wait; comm left again.
 * The path of every public collective and point-to-point call. */
shoal_status_t shoal_call_issue(shoal_comm_t comm, shoal_call_t *call, int nb,
                                shoal_request_t *req_p);
/* The same for calls[0..n) as one task (one request, completed with the
 * last; in a group, each recorded): a one-sided wait over more peers than
 * a call holds. Stream-ordered calls are queued one by one instead, in
 * order on their stream. */
shoal_status_t shoal_calls_issue(shoal_comm_t comm, shoal_call_t *calls, size_t n, int nb,
                                 shoal_request_t *req_p);

/* Run one call on comm now (the executor's side): pre-multiplied sums and
 * staged in-place inputs, algorithm selection, plan and run, the sticky
 * error on failure. */
shoal_status_t shoal_call_run(struct shoal_comm *comm, const shoal_call_t *call);

/* The cost model's estimate, in seconds, of running call on comm. */
double shoal_call_estimate(const struct shoal_comm *comm, const shoal_call_t *call);

/* Run a task's calls: fused all-reduces and collectives in order, then every
 * send and receive together. */
shoal_status_t shoal_calls_run(struct shoal_comm *comm, const shoal_call_t *calls,
                               size_t ncalls);

/* Check a call's arguments on an entered comm and fill in its derived
 * fields (premul). The reason goes to comm's last error; comm stays usable. */
shoal_status_t shoal_call_check(struct shoal_comm *comm, shoal_call_t *call, int in_group);

/* Whether the call moves nothing on any rank (count 0, except for an
 * all-to-all-v; a single-rank barrier): it then completes at once. */
int shoal_call_is_empty(const struct shoal_comm *comm, const shoal_call_t *call);

/* The message of a send or receive call to another rank, not yet moved. */
void shoal_call_xfer(struct shoal_comm *comm, const shoal_call_t *call, shoal_xfer_t *x);

/* Whether the call is a send or receive. */
static inline int shoal_call_is_p2p(const shoal_call_t *call)
{
    return call->args.kind == SHOAL_COLL_SEND || call->args.kind == SHOAL_COLL_RECV;
}

/* Groups (group.c): whether the calling thread is inside a group, and
 * recording a checked call into it (with a request to complete at the
 * group's end when req_p is not NULL). */
int shoal_group_active(void);
int shoal_group_depth(void);
/* End the group like shoal_group_end, but run nothing: *seconds_p gets the
 * cost model's estimate of the group (the slowest communicator's sum; 0 for
 * an inner end). Requests recorded in it complete with SHOAL_OK. */
shoal_status_t shoal_group_simulate_end(double *seconds_p);
shoal_status_t shoal_group_record(struct shoal_comm *comm, const shoal_call_t *call,
                                  shoal_request_t *req_p);

/* A pre-multiplied sum whose scalar stays at *scalar and is read each time
 * a call with the op runs (scalar must outlive the op). */
shoal_status_t shoal_op_create_premul_sum_ref(shoal_comm_t comm, const void *scalar,
                                              shoal_dtype_t dtype, shoal_op_t *op_p);

/* Pre-multiplied sums (premul.c): dst = scalar * src, elementwise, with the
 * PROD kernel's rounding. */
void shoal_premul_scale(void *dst, const void *src, size_t count, shoal_dtype_t dtype,
                        const void *scalar);

#endif
