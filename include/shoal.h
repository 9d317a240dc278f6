/*
 * shoal: collective communication for host and device memory.
 *
 * Native API. Every call returns a shoal_status_t; errno never crosses this
 * interface. A failing call logs its reason once (see SHOAL_DEBUG) and keeps
 * a per-communicator copy of it (shoal_comm_last_error).
 *
 * Thread safety: shoal_get_unique_id, shoal_status_string, shoal_dtype_size
 * and shoal_version are thread-safe. Different communicators may be used
 * from different threads concurrently. On one communicator, operations
 * (collectives, send/recv and their non-blocking forms) may be issued from
 * several threads: they are queued under a lock and run one at a time in the
 * order they were queued, so the threads must agree with the other ranks on
 * that order (issue from one thread where the order matters). shoal_test,
 * shoal_wait and shoal_wait_all may be called from any thread, the issuing
 * one or another, on requests it owns: one thread at a time tests or waits
 * a given request. Groups are per thread. shoal_comm_split,
 * shoal_comm_shrink, shoal_comm_destroy, shoal_comm_register,
 * shoal_comm_deregister and the pre-multiplied sum calls must not run
 * concurrently with other calls on the same communicator (registration
 * keeps an unlocked list per communicator), except that a shrink with
 * SHOAL_SHRINK_ABORT may be called while other threads are blocked in calls
 * on it (operations, or a split waiting for a peer): it stops them.
 * shoal_comm_abort may be called from any thread at any time.
 *
 * Ownership: user buffers are always borrowed for the duration of a call and
 * never kept. A communicator is owned by the caller from a successful init or
 * split until shoal_comm_destroy or shoal_comm_abort.
 */
#ifndef SHOAL_H
#define SHOAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHOAL_VERSION_MAJOR 0
#define SHOAL_VERSION_MINOR 1
#define SHOAL_VERSION_PATCH 0

/* X(name, string): the one list of status codes; order gives the values. */
#define SHOAL_STATUS_LIST(X)                                                  \
    X(SHOAL_OK, "success")                                                    \
    X(SHOAL_INPROGRESS, "operation in progress")                              \
    X(SHOAL_ERR_INVALID_ARG, "invalid argument")                              \
    X(SHOAL_ERR_NO_MEMORY, "out of memory")                                   \
    X(SHOAL_ERR_SYSTEM, "system call failed")                                 \
    X(SHOAL_ERR_TIMEOUT, "timed out")                                         \
    X(SHOAL_ERR_PEER, "a remote rank failed or disconnected")                 \
    X(SHOAL_ERR_AUTH, "authentication failed")                                \
    X(SHOAL_ERR_UNSUPPORTED, "operation not supported")                       \
    X(SHOAL_ERR_ABORTED, "communicator aborted")                              \
    X(SHOAL_ERR_INTERNAL, "internal error")                                   \
    X(SHOAL_ERR_MISMATCH, "ranks called different collectives")

typedef enum {
#define SHOAL_STATUS_ENUM_(name, str) name,
    SHOAL_STATUS_LIST(SHOAL_STATUS_ENUM_)
#undef SHOAL_STATUS_ENUM_
    SHOAL_STATUS_COUNT
} shoal_status_t;

/* Data types; the values equal NCCL's ncclDataType_t. */
typedef enum {
    SHOAL_INT8 = 0,
    SHOAL_UINT8 = 1,
    SHOAL_INT32 = 2,
    SHOAL_UINT32 = 3,
    SHOAL_INT64 = 4,
    SHOAL_UINT64 = 5,
    SHOAL_FLOAT16 = 6,
    SHOAL_FLOAT32 = 7,
    SHOAL_FLOAT64 = 8,
    SHOAL_BFLOAT16 = 9,
    SHOAL_FP8_E4M3 = 10,
    SHOAL_FP8_E5M2 = 11,
    SHOAL_DTYPE_COUNT
} shoal_dtype_t;

/* Reduction operations; the values equal NCCL's ncclRedOp_t. */
typedef enum {
    SHOAL_SUM = 0,
    SHOAL_PROD = 1,
    SHOAL_MAX = 2,
    SHOAL_MIN = 3,
    SHOAL_AVG = 4, /* integers: sum then divide (truncating); floats: sum times 1/n */
    SHOAL_OP_COUNT, /* values from here up to SHOAL_BAND are pre-multiplied sums
                     * (shoal_op_create_premul_sum) */
    /* Bitwise and logical ops (MPI's MPI_BAND .. MPI_LXOR), on the integer
     * types only: another dtype is SHOAL_ERR_INVALID_ARG, and so is device
     * memory. The logical ones take nonzero as true and give 1 or 0. NCCL
     * has none of them; their values lie above every pre-multiplied sum's. */
    SHOAL_BAND = 0x10000,
    SHOAL_BOR,
    SHOAL_BXOR,
    SHOAL_LAND,
    SHOAL_LOR,
    SHOAL_LXOR,
    SHOAL_BITOP_END /* one past the last of them */
} shoal_op_t;

#define SHOAL_UNIQUE_ID_BYTES 128

/* Opaque rendezvous token: the root's address and a random secret. Treat it
 * as a password: anyone holding it may join the communicator. */
typedef struct {
    unsigned char bytes[SHOAL_UNIQUE_ID_BYTES];
} shoal_unique_id_t;

typedef struct shoal_comm *shoal_comm_t;

/* A non-blocking operation in flight; see shoal_test. */
typedef struct shoal_request *shoal_request_t;

/* Color for shoal_comm_split: this rank joins no new communicator. */
#define SHOAL_SPLIT_NOCOLOR (-1)

/* Flags of shoal_comm_shrink. */
#define SHOAL_SHRINK_DEFAULT 0 /* leave the parent as it is */
#define SHOAL_SHRINK_ABORT 1   /* stop the parent's operations first */

/* Static string for a status; never NULL ("unknown status" if out of range). */
const char *shoal_status_string(shoal_status_t status);

/* Size in bytes of one element of dtype.
 * Returns SHOAL_ERR_INVALID_ARG for an unknown dtype or a NULL size_p. */
shoal_status_t shoal_dtype_size(shoal_dtype_t dtype, size_t *size_p);

/* Library version as major*10000 + minor*100 + patch. */
int shoal_version(void);

/*
 * Create a rendezvous id. The calling process becomes the root: it starts
 * listening on an address of the interface chosen by SHOAL_SOCKET_IFNAME (or
 * the default choice) and must be the process that later calls
 * shoal_comm_init with rank 0 (a child forked after this call qualifies).
 * The id must reach the other ranks by the caller's means.
 * Returns SHOAL_OK, SHOAL_ERR_INVALID_ARG (NULL id_p) or SHOAL_ERR_SYSTEM.
 */
shoal_status_t shoal_get_unique_id(shoal_unique_id_t *id_p);

/*
 * Form a communicator of nranks ranks; collective over all of them. Fails
 * with SHOAL_ERR_TIMEOUT if the ranks have not all arrived within
 * SHOAL_TIMEOUT. *comm_p is written only on success.
 * Returns SHOAL_OK, SHOAL_ERR_INVALID_ARG (nranks < 1, rank out of range,
 * NULL pointers), SHOAL_ERR_TIMEOUT, SHOAL_ERR_PEER, SHOAL_ERR_AUTH,
 * SHOAL_ERR_SYSTEM or SHOAL_ERR_NO_MEMORY.
 */
shoal_status_t shoal_comm_init(int nranks, const shoal_unique_id_t *id,
                               int rank, shoal_comm_t *comm_p);

/*
 * Form a communicator from the launcher's environment, without passing an id:
 * SHOAL_RANK/SHOAL_SIZE/SHOAL_ADDR; a PMIx launcher (mpirun, srun --mpi=pmix),
 * which carries the id itself; torchrun (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT: shoal listens on SHOAL_PORT, default MASTER_PORT+1); Open MPI
 * (OMPI_COMM_WORLD_*) or Slurm (SLURM_PROCID, SLURM_NTASKS) with the address
 * from SHOAL_ADDR or MASTER_ADDR. Without PMIx, the connection secret comes
 * from a passphrase every rank holds (SHOAL_SECRET_FILE, a file only its
 * owner may read, or SHOAL_SECRET), through a salted scrypt. With neither,
 * SHOAL_AUTH decides: strict (the default) refuses; warn and off derive the
 * secret from the job's identity, which others can compute.
 * Returns the codes of shoal_comm_init; SHOAL_ERR_AUTH when no passphrase
 * is set under SHOAL_AUTH=strict or the secret file is open to others;
 * SHOAL_ERR_INVALID_ARG when no launcher is recognised (the log says which
 * variables were looked for) or the launcher's variables are wrong.
 */
shoal_status_t shoal_comm_init_env(shoal_comm_t *comm_p);

/*
 * Split comm by color; ranks of one color form a new communicator ordered by
 * (key, old rank). Collective over comm. A rank passing SHOAL_SPLIT_NOCOLOR
 * gets *newcomm_p = NULL. comm remains valid.
 */
shoal_status_t shoal_comm_split(shoal_comm_t comm, int color, int key,
                                shoal_comm_t *newcomm_p);

/*
 * A new communicator of the ranks of comm that are not listed in
 * exclude[0..nexclude), ordered by their rank in comm. Collective over
 * those ranks only: each passes the same set (in any order); the excluded
 * ranks do not call it and may have died or left. It needs no excluded
 * rank, rank 0 included, and works on a broken communicator (one that
 * failed with SHOAL_ERR_PEER or SHOAL_ERR_TIMEOUT) or a stopped one (an
 * earlier SHOAL_SHRINK_ABORT), as it moves nothing through comm: the lowest surviving rank gathers the others
 * on a listener it opened when comm was formed, over connections that prove
 * comm's secret. The surviving ranks must have made the same earlier
 * shrinks of comm (the k-th shrink of one meets the k-th of the others).
 * exclude may be NULL when nexclude is 0.
 *
 * flags SHOAL_SHRINK_DEFAULT leaves comm as it is. SHOAL_SHRINK_ABORT first
 * stops comm's operations as shoal_comm_abort does: calls in flight on
 * other threads (a blocked collective, a split waiting for a peer) and
 * queued non-blocking operations complete with SHOAL_ERR_ABORTED, and later
 * calls on comm are refused with it; but comm stays allocated: release it
 * with shoal_comm_destroy or shoal_comm_abort, which then return at once,
 * waiting for no peer.
 *
 * *newcomm_p is written only on success; comm stays valid either way.
 * Returns SHOAL_OK; SHOAL_ERR_INVALID_ARG (invalid comm, NULL newcomm_p,
 * flags other than the two above, nexclude < 0, exclude NULL with
 * nexclude > 0, an entry out of range or listed twice, every rank excluded,
 * or the calling rank excluded) with nothing changed, comm included; or the
 * codes of shoal_comm_init (SHOAL_ERR_TIMEOUT when a survivor does not
 * arrive within SHOAL_TIMEOUT; SHOAL_ERR_AUTH, or a timeout, for a rank
 * whose set differs from the lowest survivor's: the set is bound into the
 * new communicator's secret, so such a rank is refused rather than let in),
 * the reason recorded on comm.
 */
shoal_status_t shoal_comm_shrink(shoal_comm_t comm, const int *exclude, int nexclude,
                                 int flags, shoal_comm_t *newcomm_p);

/*
 * Grow: the ranks of comm and nranks - size(comm) new ones form a new
 * communicator of nranks ranks (*newcomm_p); comm's ranks keep their
 * numbers, the new ones take size(comm) .. nranks - 1. comm stays as it
 * was, usable, and nothing travels through it.
 *
 * shoal_comm_grow_id gives the id of comm's next grow. Every rank of comm
 * derives the same one (rank 0's rendezvous address and a secret derived
 * from comm's secret and the number of its grows), so any one of them may
 * make it and hand it to the new ranks, as it would a unique id: it is a
 * password. Each id serves one grow: once comm has grown (or tried to),
 * its next id differs.
 *
 * shoal_comm_grow is called by all nranks ranks. A rank of comm passes
 * comm, id NULL (or the id, which must be comm's next one) and rank -1; a
 * new rank passes comm NULL, the id and the rank it takes. A new rank that
 * never comes makes the others fail with SHOAL_ERR_TIMEOUT at the
 * deadline (SHOAL_TIMEOUT), each naming the first missing rank in its
 * last error (rank 0 lists them all).
 */
shoal_status_t shoal_comm_grow_id(shoal_comm_t comm, shoal_unique_id_t *id_p);
shoal_status_t shoal_comm_grow(shoal_comm_t comm, int nranks, const shoal_unique_id_t *id,
                               int rank, shoal_comm_t *newcomm_p);

/* Release a communicator after all its operations completed. Collective only
 * in the sense that peers may see this rank leave; it does not wait for them.
 * comm is invalid afterwards; passing it again returns SHOAL_ERR_INVALID_ARG. */
shoal_status_t shoal_comm_destroy(shoal_comm_t comm);

/* Tear a communicator down at once, whatever its peers do. May be called
 * from another thread while a call on comm is blocked (an operation, or a
 * split forming its new communicator): that call returns SHOAL_ERR_ABORTED
 * promptly, and abort returns after it (it never waits on a peer). comm is
 * invalid afterwards. Returns SHOAL_OK; SHOAL_ERR_INVALID_ARG for an
 * invalid comm; SHOAL_ERR_TIMEOUT when calls on other threads were still
 * inside comm SHOAL_TIMEOUT after the abort (comm is aborted all the same,
 * and the last of them frees it). */
shoal_status_t shoal_comm_abort(shoal_comm_t comm);

/*
 * Memory registration: record that size bytes at buf will be used as
 * buffers of operations on comm, for transports that need registered
 * memory (RDMA, device IPC); with shm and tcp it is bookkeeping only, and
 * unregistered buffers work everywhere. Local: no other rank takes part.
 * *handle_p receives an opaque non-NULL handle, owned by comm until
 * shoal_comm_deregister or until comm is destroyed or aborted, which frees
 * the registrations left. Registrations may overlap and may be made on a
 * broken or stopped (SHOAL_SHRINK_ABORT) communicator. buf stays the
 * caller's; keep it allocated while registered.
 * Returns SHOAL_OK; SHOAL_ERR_INVALID_ARG for an invalid comm, a NULL buf
 * or handle_p, size 0 or a range past the end of the address space;
 * SHOAL_ERR_NO_MEMORY.
 */
shoal_status_t shoal_comm_register(shoal_comm_t comm, void *buf, size_t size, void **handle_p);

/* Remove a registration of comm. Returns SHOAL_ERR_INVALID_ARG, changing
 * nothing, when handle is not a live registration of comm (NULL,
 * deregistered already, or another communicator's). */
shoal_status_t shoal_comm_deregister(shoal_comm_t comm, void *handle);

/*
 * Shareable host memory: size bytes (rounded up to whole pages, zeroed,
 * page-aligned) at *ptr_p that other processes of this host can map. When
 * every rank's buffers of an all-gather, all-to-all or broadcast come from
 * here and every peer is reached through shared memory, ranks write their
 * data straight into the peers' buffers (one copy, no staging slots);
 * otherwise such buffers work as any other. No communicator is needed:
 * each communicator finds the blocks its operations use, and forgets them
 * when they are freed. The memory has no name in the file system and
 * leaves with the last process that maps it, so a rank that dies leaves
 * nothing behind.
 * The block belongs to the caller until shoal_mem_free. Thread-safe.
 * Returns SHOAL_OK; SHOAL_ERR_INVALID_ARG (with *ptr_p unchanged) for a
 * NULL ptr_p, size 0 or a size too large; SHOAL_ERR_NO_MEMORY or
 * SHOAL_ERR_SYSTEM when the system cannot provide it.
 */
shoal_status_t shoal_mem_alloc(size_t size, void **ptr_p);

/* Return a block of shoal_mem_alloc, which must not be in use by an
 * operation in flight. Thread-safe. Returns SHOAL_OK;
 * SHOAL_ERR_INVALID_ARG, changing nothing, when ptr is not the start of a
 * live block (NULL, freed already, or from another allocator). */
shoal_status_t shoal_mem_free(void *ptr);

/* This rank's index and the communicator's size. */
shoal_status_t shoal_comm_rank(shoal_comm_t comm, int *rank_p);
shoal_status_t shoal_comm_size(shoal_comm_t comm, int *size_p);

/* Whether comm is still healthy, without waiting: *status_p gets SHOAL_OK,
 * or the error that broke it, for good: a peer that died or aborted
 * (SHOAL_ERR_PEER, also found between calls, at most SHOAL_HEARTBEAT after
 * the fact, while the progress thread runs), a failure that another rank
 * reported (its status: a timeout, a mismatch...), or SHOAL_ERR_ABORTED.
 * shoal_comm_last_error then says why, naming the rank at fault. Thread-
 * safe. Returns SHOAL_ERR_INVALID_ARG for a NULL status_p or a dead comm. */
shoal_status_t shoal_comm_get_async_error(shoal_comm_t comm, shoal_status_t *status_p);

/* Who runs comm's non-blocking operations (shoal_iallreduce...):
 * SHOAL_PROGRESS_THREAD, a progress thread of comm's own (the default
 * unless SHOAL_PROGRESS=caller), or SHOAL_PROGRESS_CALLER: a thread that
 * waits or tests a request of comm, or makes a blocking call on it, which
 * then runs the operations queued before its own too. A program with a
 * thread of its own that waits every request it issues (a completion
 * thread) needs no second one: each operation would wake the progress
 * thread twice, and on a host whose ranks fill its cores each wake-up
 * takes a core from a peer. Stream-ordered calls need the progress thread,
 * and async errors are found between calls only while it runs (see
 * shoal_comm_get_async_error).
 * Only while no operation of comm is in flight and its progress thread
 * has not started (it starts at the first non-blocking or stream-ordered
 * call made in SHOAL_PROGRESS_THREAD mode, and runs until comm is
 * destroyed). Returns SHOAL_OK; SHOAL_ERR_INVALID_ARG, changing nothing,
 * for an invalid comm or mode, or once that thread runs or with an
 * operation in flight. */
typedef enum { SHOAL_PROGRESS_THREAD = 0, SHOAL_PROGRESS_CALLER = 1 } shoal_progress_t;
shoal_status_t shoal_comm_set_progress(shoal_comm_t comm, shoal_progress_t mode);

/* The reason of the last failure on comm ("" if none). The string belongs to
 * comm and stays valid until the next call on comm: where several threads
 * use comm, a failure on one may replace the text another reads. For a
 * NULL or invalid comm, the last failure of this thread outside any
 * communicator. */
const char *shoal_comm_last_error(shoal_comm_t comm);

/*
 * recvbuf[i] = op over all ranks of sendbuf[i], for i < count; every rank
 * gets bitwise identical results. sendbuf == recvbuf is in-place. Buffers
 * are host memory. count 0 is allowed: nothing moves, no rank waits for
 * another, and NULL buffers are accepted.
 * Returns SHOAL_OK; SHOAL_ERR_INVALID_ARG (NULL buffer with count > 0,
 * unknown dtype or op, count*size overflowing, invalid comm) with comm left
 * usable; SHOAL_ERR_TIMEOUT or SHOAL_ERR_PEER when a rank fails.
 */
shoal_status_t shoal_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                               shoal_dtype_t dtype, shoal_op_t op,
                               shoal_comm_t comm);

/*
 * The collectives below follow the same rules as shoal_allreduce: host
 * buffers borrowed for the call; count 0 moves nothing; bad arguments give
 * SHOAL_ERR_INVALID_ARG with a reason, write nothing and leave comm usable;
 * a failed or vanished rank gives SHOAL_ERR_PEER or SHOAL_ERR_TIMEOUT and
 * breaks comm. Every rank of comm must make the same calls in the same order.
 * A root or peer outside 0..nranks-1 is SHOAL_ERR_INVALID_ARG.
 */

/* recvbuf (recvcount elements) = op over all ranks of block `rank` of
 * sendbuf (nranks * recvcount elements). In place when
 * recvbuf == sendbuf + rank * recvcount elements. */
shoal_status_t shoal_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm);

/* Block r of recvbuf (nranks * sendcount elements) = sendbuf of rank r. In
 * place when sendbuf == recvbuf + rank * sendcount elements. */
shoal_status_t shoal_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                               shoal_dtype_t dtype, shoal_comm_t comm);

/* recvbuf on every rank = sendbuf of root (sendbuf is read on root only).
 * In place when sendbuf == recvbuf on root. */
shoal_status_t shoal_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                               shoal_dtype_t dtype, int root, shoal_comm_t comm);

/* recvbuf on root = op over all ranks of sendbuf; recvbuf is not touched
 * (and may be NULL) elsewhere. */
shoal_status_t shoal_reduce(const void *sendbuf, void *recvbuf, size_t count,
                            shoal_dtype_t dtype, shoal_op_t op, int root, shoal_comm_t comm);

/* Barrier: returns on a rank once every rank has entered it. */
shoal_status_t shoal_barrier(shoal_comm_t comm);

/* Block j of sendbuf (count elements) goes to rank j; block j of recvbuf
 * comes from rank j. Both hold nranks * count elements. In place when
 * sendbuf == recvbuf; other overlaps are SHOAL_ERR_INVALID_ARG. */
shoal_status_t shoal_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                              shoal_dtype_t dtype, shoal_comm_t comm);

/* sendcounts[j] elements at sendbuf + sdispls[j] elements go to rank j;
 * recvcounts[j] elements from rank j land at recvbuf + rdispls[j]. Each
 * array has nranks entries and is read during the call only (for the
 * non-blocking form: until the request completes). recvcounts[j] must equal
 * rank j's sendcounts[this rank]. Receive blocks must not overlap each
 * other; sendbuf == recvbuf is in place (the input is staged first). */
shoal_status_t shoal_alltoallv(const void *sendbuf, const size_t *sendcounts,
                               const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                               const size_t *rdispls, shoal_dtype_t dtype, shoal_comm_t comm);

/* Block r of root's recvbuf (nranks * sendcount elements) = sendbuf of rank
 * r; recvbuf is not touched (and may be NULL) elsewhere. In place on root
 * when sendbuf == recvbuf + root * sendcount elements. */
shoal_status_t shoal_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                            shoal_dtype_t dtype, int root, shoal_comm_t comm);

/* recvbuf (recvcount elements) of rank r = block r of root's sendbuf
 * (nranks * recvcount elements; read on root only). In place on root when
 * recvbuf == sendbuf + root * recvcount elements. */
shoal_status_t shoal_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                             shoal_dtype_t dtype, int root, shoal_comm_t comm);

/* Point to point. The n-th send from rank a to rank b matches the n-th
 * receive of b from a, with the same count and dtype (a different size is
 * an error on the receiver). Outside a group a send may wait until the
 * peer receives, so two ranks that send to each other first must put the
 * pair in a group; inside a group any order completes. count 0 is allowed.
 * peer == own rank works inside a group only. */
shoal_status_t shoal_send(const void *sendbuf, size_t count, shoal_dtype_t dtype, int peer,
                          shoal_comm_t comm);
shoal_status_t shoal_recv(void *recvbuf, size_t count, shoal_dtype_t dtype, int peer,
                          shoal_comm_t comm);

/*
 * Pre-multiplied sum: a new op whose result is the sum over ranks of
 * (*scalar) * input. scalar points to one element of dtype, read during
 * this call; the op only serves buffers of that dtype (others:
 * SHOAL_ERR_INVALID_ARG). The op belongs to comm: create and destroy it on
 * every rank, and use it only on comm. Returns SHOAL_ERR_INVALID_ARG for a
 * NULL pointer, an unknown dtype, or (destroy) an op that is not a live
 * pre-multiplied sum of comm.
 */
shoal_status_t shoal_op_create_premul_sum(shoal_comm_t comm, const void *scalar,
                                          shoal_dtype_t dtype, shoal_op_t *op_p);
shoal_status_t shoal_op_destroy(shoal_op_t op, shoal_comm_t comm);

/*
 * Groups. Between shoal_group_start and shoal_group_end the calling thread's
 * operations are only recorded (they return SHOAL_OK once their arguments
 * pass the checks); shoal_group_end runs them all and returns the first
 * failure. All-reduces of the same dtype and op are fused into one, sends
 * and receives progress together so that any order completes, and the
 * group's collectives run in the order they were called. Buffers must stay
 * valid until shoal_group_end returns. Groups nest: only the outermost end
 * runs them. The non-blocking forms may be used inside a group; their
 * requests complete with the group.
 * shoal_group_end returns SHOAL_ERR_INVALID_ARG without a matching start.
 */
shoal_status_t shoal_group_start(void);
shoal_status_t shoal_group_end(void);

/*
 * Non-blocking forms: the same arguments and checks as the blocking call,
 * plus req_p, which receives a request on SHOAL_OK. Buffers (and the
 * all-to-all-v arrays) belong to the operation until it completes.
 * Operations on one communicator run one at a time, in issue order, whether
 * blocking or not. They progress on the communicator's progress thread
 * (SHOAL_PROGRESS=thread, the default) or, with SHOAL_PROGRESS=caller,
 * inside shoal_test / shoal_wait / blocking calls on that communicator.
 */
shoal_status_t shoal_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm,
                                shoal_request_t *req_p);
shoal_status_t shoal_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                     shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm,
                                     shoal_request_t *req_p);
shoal_status_t shoal_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                shoal_dtype_t dtype, shoal_comm_t comm, shoal_request_t *req_p);
shoal_status_t shoal_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                shoal_dtype_t dtype, int root, shoal_comm_t comm,
                                shoal_request_t *req_p);
shoal_status_t shoal_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                             shoal_dtype_t dtype, shoal_op_t op, int root, shoal_comm_t comm,
                             shoal_request_t *req_p);
shoal_status_t shoal_ibarrier(shoal_comm_t comm, shoal_request_t *req_p);
shoal_status_t shoal_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                               shoal_dtype_t dtype, shoal_comm_t comm, shoal_request_t *req_p);
shoal_status_t shoal_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                                const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                const size_t *rdispls, shoal_dtype_t dtype, shoal_comm_t comm,
                                shoal_request_t *req_p);
shoal_status_t shoal_igather(const void *sendbuf, void *recvbuf, size_t sendcount,
                             shoal_dtype_t dtype, int root, shoal_comm_t comm,
                             shoal_request_t *req_p);
shoal_status_t shoal_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                              shoal_dtype_t dtype, int root, shoal_comm_t comm,
                              shoal_request_t *req_p);
/* Non-blocking send and receive never wait on each other: consecutive
 * ones (with no collective between them) progress together. */
shoal_status_t shoal_isend(const void *sendbuf, size_t count, shoal_dtype_t dtype, int peer,
                           shoal_comm_t comm, shoal_request_t *req_p);
shoal_status_t shoal_irecv(void *recvbuf, size_t count, shoal_dtype_t dtype, int peer,
                           shoal_comm_t comm, shoal_request_t *req_p);

/*
 * One-sided communication. A window is memory that every rank of comm
 * offers together (size may differ by rank, and be 0; host memory, or
 * device memory in a process that uses CUDA): shoal_win_create is
 * collective, and fails on every rank, naming the rank, when one rank's
 * arguments are bad. Then any rank writes into any rank's part without that
 * rank's call:
 * - shoal_put_signal writes size bytes from src at byte offset of peer's
 *   part of win, then counts one signal at peer from this rank. With shm
 *   (and ib, where the window's memory is registered) the bytes go
 *   straight into the peer's memory; otherwise through the transport's
 *   slots, copied by the peer as it takes the signal. Device memory, on
 *   either side, is copied through the host (the slots) by a stream of
 *   shoal's own, waited for.
 * - shoal_signal counts one signal at peer, moving no data.
 * - shoal_wait_signal returns once, for each entry, count signals from
 *   peer have arrived beyond those earlier waits consumed, and consumes
 *   them. Ordering: the signals from one rank arrive in the order it issued
 *   its puts and signals, each behind its put's bytes, so when the wait
 *   returns, the bytes of every put whose signal it (or an earlier wait)
 *   consumed are in place, and so are those of every put the same rank
 *   issued before them. Puts of one rank to the same bytes land in issue
 *   order. A wait that is not satisfied by the deadline (SHOAL_TIMEOUT)
 *   fails with SHOAL_ERR_TIMEOUT naming the peer and how many signals came,
 *   and breaks comm as any deadline does.
 * The calls are ordered with every other call on comm (one at a time, in
 * issue order), may be recorded in groups, and return SHOAL_OK once the
 * source may be reused; peer may be the caller's own rank. A put needs a
 * free slot to its peer for its signal: it waits (until the deadline) while
 * the peer has not taken the ones before, which the peer does inside any
 * call on comm. Argument errors (unknown window, a range past the peer's
 * part, a NULL pointer with bytes, a peer outside the communicator, a
 * count of 0) are SHOAL_ERR_INVALID_ARG with comm usable. shoal_win_free
 * is local; call it after the calls that use the window completed. Data
 * other ranks put into a freed part is dropped, with a warning.
 */
typedef struct shoal_win *shoal_win_t;
typedef struct {
    int peer;
    uint32_t count;
} shoal_signal_wait_t;

shoal_status_t shoal_win_create(void *buf, size_t size, shoal_comm_t comm, shoal_win_t *win_p);
shoal_status_t shoal_win_free(shoal_win_t win, shoal_comm_t comm);
shoal_status_t shoal_put_signal(const void *src, size_t size, int peer, shoal_win_t win,
                                size_t offset, shoal_comm_t comm);
shoal_status_t shoal_signal(int peer, shoal_comm_t comm);
shoal_status_t shoal_wait_signal(const shoal_signal_wait_t *waits, size_t nwaits,
                                 shoal_comm_t comm);
/* Non-blocking forms; waits is copied, src belongs to the put until the
 * request completes. */
shoal_status_t shoal_iput_signal(const void *src, size_t size, int peer, shoal_win_t win,
                                 size_t offset, shoal_comm_t comm, shoal_request_t *req_p);
shoal_status_t shoal_isignal(int peer, shoal_comm_t comm, shoal_request_t *req_p);
shoal_status_t shoal_iwait_signal(const shoal_signal_wait_t *waits, size_t nwaits,
                                  shoal_comm_t comm, shoal_request_t *req_p);

/*
 * Stream-ordered forms, for buffers in GPU memory (CUDA). Each takes the
 * arguments of its blocking form and a CUDA stream (a cudaStream_t or
 * CUstream, passed as void *; NULL is the legacy default stream) and
 * follows NCCL's semantics: the call queues its work on the stream and
 * returns without waiting; the stream's later work sees the result; the
 * host does not wait (inside shoal_group_start/end the group's work is
 * queued at the outermost shoal_group_end, which then returns without
 * waiting either). Buffers may be device, managed, pinned or ordinary
 * host memory, in any mix; on the host they must stay valid and
 * untouched until the stream has passed the call.
 *
 * The work is done by shoal's progress thread once the stream reaches the
 * call (SHOAL_PROGRESS=caller refuses these calls): between ranks of one
 * host, the collectives on device buffers go device to device (CUDA
 * memory handles, reductions by shoal's kernels); sends and receives, and
 * device buffers across hosts, are staged through
 * pinned host memory (SHOAL_CUDA_PATH: auto, staged, direct). The
 * host forms (shoal_allreduce...) refuse device memory. Returns SHOAL_OK
 * once queued; argument errors as the blocking form;
 * SHOAL_ERR_UNSUPPORTED when there is no CUDA (no module, no driver, no
 * device: shoal_comm_last_error says which). A failure of the operation
 * itself is reported by the communicator's next call and
 * shoal_comm_get_async_error; the stream still goes on past it, with the
 * output undefined.
 */
shoal_status_t shoal_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                      shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm,
                                      void *stream);
shoal_status_t shoal_reduce_scatter_stream(const void *sendbuf, void *recvbuf,
                                           size_t recvcount, shoal_dtype_t dtype, shoal_op_t op,
                                           shoal_comm_t comm, void *stream);
shoal_status_t shoal_allgather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                      shoal_dtype_t dtype, shoal_comm_t comm, void *stream);
shoal_status_t shoal_broadcast_stream(const void *sendbuf, void *recvbuf, size_t count,
                                      shoal_dtype_t dtype, int root, shoal_comm_t comm,
                                      void *stream);
shoal_status_t shoal_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                   shoal_dtype_t dtype, shoal_op_t op, int root,
                                   shoal_comm_t comm, void *stream);
shoal_status_t shoal_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                     shoal_dtype_t dtype, shoal_comm_t comm, void *stream);
shoal_status_t shoal_gather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   shoal_dtype_t dtype, int root, shoal_comm_t comm,
                                   void *stream);
shoal_status_t shoal_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    shoal_dtype_t dtype, int root, shoal_comm_t comm,
                                    void *stream);
shoal_status_t shoal_send_stream(const void *sendbuf, size_t count, shoal_dtype_t dtype,
                                 int peer, shoal_comm_t comm, void *stream);
shoal_status_t shoal_recv_stream(void *recvbuf, size_t count, shoal_dtype_t dtype, int peer,
                                 shoal_comm_t comm, void *stream);
/* One-sided calls, stream-ordered: a put reads src once the stream
 * reaches it (a device src is copied out by the stream there), and a wait
 * holds the stream's later work until its signals came, with the bytes of
 * their puts in place. A wait that is not satisfied by the deadline fails
 * comm (shoal_comm_get_async_error), and the stream goes on. */
shoal_status_t shoal_put_signal_stream(const void *src, size_t size, int peer, shoal_win_t win,
                                       size_t offset, shoal_comm_t comm, void *stream);
shoal_status_t shoal_signal_stream(int peer, shoal_comm_t comm, void *stream);
shoal_status_t shoal_wait_signal_stream(const shoal_signal_wait_t *waits, size_t nwaits,
                                        shoal_comm_t comm, void *stream);

/*
 * Compression (issue: compressed collectives). A compressor is a handle per
 * logical tensor or bucket of count values: it owns that tensor's error
 * feedback (each rank's residual), PowerSGD's Q matrices, the random
 * streams' step counter. shoal_allreduce_compressed reduces a buffer of the
 * compressor's count and dtype (float32, float16 or bfloat16; the latter two
 * are widened to float32 for the reduction) with SHOAL_SUM or SHOAL_AVG
 * only; every rank ends with bitwise the same result.
 *
 * Kinds:
 * - INT8: one fp32 scale per block of `block` values (32, 64, 128), round
 *   to nearest or stochastic; each hop of the ring dequantises, adds and
 *   requantises; the two-shot variant quantises each contribution once and
 *   the sum once.
 * - TERNARY: a scale per block shared by all ranks (a max all-reduce of the
 *   blocks' largest values first, optionally clipped at clip_sigma standard
 *   deviations, each rounded up to bf16 for it), stochastic rounding to
 *   {-1, 0, +1} x scale, exact integer sums on the wire.
 * - POWERSGD: each matrix of the layout (rows x cols > 1) becomes P Q^T of
 *   rank min(rank, rows, cols) (two all-reduces of P and Q); vectors, and
 *   matrices that would not shrink, are reduced in full precision. Q is
 *   common to all ranks (seeded) and warm-started from the previous call.
 *   The first warmup_steps calls are plain all-reduces.
 * - SIGN: 1 bit a value and one fp32 scale a block (the mean magnitude
 *   with nearest rounding, the largest with stochastic rounding, whose
 *   signs are unbiased): 1-bit Adam's compressed all-reduce, each
 *   contribution quantised once straight to the value's owner, the owner's
 *   fp32 sum quantised once more and gathered. With error feedback, the
 *   signs' large error comes back at the next steps.
 * - MAJORITY: the majority vote of Distributed Lion: the result is the
 *   sign (-1, 0 or +1) of the sum over the ranks of the signs of the
 *   inputs (a NaN or a zero votes 0), summed exactly as small integers (4
 *   bits a value up to 7 ranks, 8 up to 127, 16 beyond); SUM and AVG give
 *   the same vote; no error feedback (error_feedback must be 0).
 * - INT4: as INT8 with 4-bit codes in [-7, 7] (a scale of max |x| / 7 a
 *   block), the two-shot schedule by default.
 * - ADAPTIVE: a choice per tensor of the layout, under an error budget:
 *   none (full precision), INT8 with block 128, 64 or 32, INT4, TERNARY,
 *   or POWERSGD at options.rank (for a matrix it shrinks). At the first
 *   call of every window of options.window calls, each rank measures, for
 *   every tensor and every choice, the squared error that choice would
 *   leave in its residual (what error feedback keeps) on this call's input
 *   plus residual, and the tensor's squared norm; the ranks sum these
 *   statistics (an all-reduce), so every rank holds the same ones, and
 *   each picks, as a dynamic programme over the tensors (L-GreCo's), the
 *   choices that send the fewest bytes while the bucket's relative error,
 *   sqrt(sum of errors / sum of norms), stays within options.budget (its
 *   errors counted in thousandths of the budget, rounded up). Every rank
 *   reaches the same choices. Each tensor then runs its choice's schedule
 *   (as that kind's compressor would, with the tensor's slice of the
 *   residual; nearest rounding). shoal_compressor_choices reports the
 *   choices and their history; checkpoints keep them.
 *
 * The compressor serves one collective (options.coll): the all-reduce
 * above, or the all-gather, reduce-scatter and all-to-all of sharded
 * training and of mixture-of-experts (INT8, INT4 and, for the
 * reduce-scatter, SIGN; see their calls below).
 *
 * Error feedback (error_feedback = 1): the part of this rank's input that
 * the compression lost is kept and added to the next call's input; it is
 * updated only when the call succeeds. Summed over the ranks, the residuals
 * after a call are the exact sum of the inputs (plus the earlier residuals)
 * minus the result (for AVG, nranks times the result).
 */
typedef struct shoal_compressor *shoal_compressor_t;

typedef enum {
    SHOAL_COMPRESS_INT8 = 1,
    SHOAL_COMPRESS_TERNARY = 2,
    SHOAL_COMPRESS_POWERSGD = 3,
    SHOAL_COMPRESS_SIGN = 4,
    SHOAL_COMPRESS_MAJORITY = 5,
    SHOAL_COMPRESS_INT4 = 6,
    SHOAL_COMPRESS_ADAPTIVE = 7,
} shoal_compress_kind_t;

/* The collective a compressor serves. */
typedef enum {
    SHOAL_COMPRESS_COLL_ALLREDUCE = 0,
    SHOAL_COMPRESS_COLL_ALLGATHER = 1,
    SHOAL_COMPRESS_COLL_REDUCE_SCATTER = 2,
    SHOAL_COMPRESS_COLL_ALLTOALL = 3,
} shoal_compress_coll_t;

/* The schedule of the all-reduce's INT8 and TERNARY; POWERSGD and
 * MAJORITY ignore it. AUTO: the ring on up to 8 ranks, two-shot beyond (the
 * ring's per-hop error grows with the ranks); with more than one host,
 * full precision inside each host and the compressed schedule across hosts
 * only. TREE (INT8 only): the double binary tree, requantising at each
 * level (log2 n quantisations of a value, against the ring's n-1), for
 * many ranks and small tensors. SIGN: two-shot only (a ring would requantise
 * partial sums to signs). INT4: AUTO is two-shot; RING may be asked for.
 * The reduce-scatter: TWO_SHOT (AUTO) or RING; see there. */
typedef enum {
    SHOAL_COMPRESS_ALGO_AUTO = 0,
    SHOAL_COMPRESS_ALGO_RING = 1,
    SHOAL_COMPRESS_ALGO_TWO_SHOT = 2,
    SHOAL_COMPRESS_ALGO_TREE = 3,
} shoal_compress_algo_t;

typedef struct {
    size_t size;                /* sizeof(shoal_compress_options_t) */
    shoal_compress_kind_t kind;
    int error_feedback;         /* 1: keep residuals (see above) */
    unsigned block;             /* INT8, INT4, SIGN, TERNARY: values per scale; 32, 64,
                                 * 128 (MAJORITY: the vote's wire blocks) */
    int stochastic;             /* INT8, INT4, SIGN: stochastic rounding (TERNARY always is) */
    float clip_sigma;           /* TERNARY: clip at k standard deviations; 0: none */
    unsigned rank;              /* POWERSGD: the approximation's rank */
    unsigned warmup_steps;      /* POWERSGD: plain all-reduces first */
    uint64_t seed;              /* stochastic rounding and PowerSGD's first Q */
    shoal_compress_algo_t algo;
    shoal_compress_coll_t coll; /* the collective served; ALLREDUCE by default */
    float budget;               /* ADAPTIVE: the bucket's relative error, > 0 */
    unsigned window;            /* ADAPTIVE: calls between choices, >= 1 */
} shoal_compress_options_t;

/* The tensors of a bucket, in order: tensor t is rows[t] x cols[t] values,
 * row-major; the products add up to the compressor's count. NULL layout:
 * one vector of count values. */
typedef struct {
    size_t ntensors;
    const size_t *rows;
    const size_t *cols;
} shoal_compress_layout_t;

/* What one compressed call did on this rank. */
typedef struct {
    uint64_t bytes_sent;     /* bytes this rank put on its links */
    uint64_t bytes_received; /* bytes it took off them */
    /* The bytes the full-precision collective sends per rank over
     * bytes_sent: 2 (n-1)/n x count x dtype size for the all-reduce (its
     * ring), (n-1) x count x dtype size for the all-gather, reduce-scatter
     * and all-to-all (count per rank, as their calls say); 0 when nothing
     * was sent (one rank, count 0). */
    double ratio;
    uint64_t step;           /* the compressor's call count before this call */
    /* ADAPTIVE: the bucket's relative error that the choices in force
     * were estimated to leave (the agreed statistics); 0 otherwise. */
    double error;
} shoal_compress_info_t;

/* ADAPTIVE: one tensor's choice (shoal_compressor_choices). kind 0 is full
 * precision; block for INT8, INT4 and TERNARY, rank for POWERSGD. */
typedef struct {
    shoal_compress_kind_t kind;
    unsigned block;
    unsigned rank;
    double error;      /* its relative error estimated at the last choice */
    uint64_t bytes;    /* its wire bytes per call of one rank's tensor */
    uint64_t since;    /* the step from which it is in force */
    uint64_t changes;  /* how often the tensor's choice changed */
} shoal_compress_choice_t;

/* Defaults for kind: error feedback on (off for MAJORITY), block 64,
 * nearest rounding (INT8, INT4, SIGN), no clipping, rank 4, no warm-up,
 * seed 0, AUTO, the all-reduce, budget 0.1 and window 100. Returns
 * SHOAL_ERR_INVALID_ARG for a NULL options or an unknown kind. */
shoal_status_t shoal_compress_options_init(shoal_compress_options_t *options,
                                           shoal_compress_kind_t kind);

/*
 * A compressor for tensors of count values of dtype on comm. Collective over
 * comm: every rank passes the same options, count, dtype and layout, or
 * every rank gets SHOAL_ERR_INVALID_ARG naming a rank that differs. Also
 * SHOAL_ERR_INVALID_ARG for a NULL pointer, an options size this library
 * does not know, an unknown kind, algo or coll, a kind or schedule the
 * collective does not offer, a block other than 32/64/128, a
 * negative or non-finite clip_sigma, rank 0, an ADAPTIVE budget that is not
 * finite and > 0 or window 0, a layout whose sizes do not add
 * up to count, or a dtype other than float32/float16/bfloat16;
 * SHOAL_ERR_NO_MEMORY; the codes of a failed all-gather on comm.
 */
shoal_status_t shoal_compressor_create(shoal_comm_t comm, const shoal_compress_options_t *options,
                                       size_t count, shoal_dtype_t dtype,
                                       const shoal_compress_layout_t *layout,
                                       shoal_compressor_t *comp_p);
/* Free a compressor with no call in flight (SHOAL_ERR_INVALID_ARG if one
 * is). Local. */
shoal_status_t shoal_compressor_destroy(shoal_compressor_t comp);

/*
 * Checkpoints. The state (step counter, residuals, Q matrices) is a byte
 * string of shoal_compressor_state_size bytes that only a compressor with
 * the same options, count, dtype, layout and rank count accepts (set_state
 * says SHOAL_ERR_INVALID_ARG otherwise, and changes nothing). Each rank
 * saves and restores its own. reset returns to the state of a new
 * compressor. Local; not while a call is in flight.
 */
shoal_status_t shoal_compressor_state_size(shoal_compressor_t comp, size_t *bytes_p);
shoal_status_t shoal_compressor_get_state(shoal_compressor_t comp, void *buf, size_t bytes);
shoal_status_t shoal_compressor_set_state(shoal_compressor_t comp, const void *buf,
                                          size_t bytes);
shoal_status_t shoal_compressor_reset(shoal_compressor_t comp);
/* ADAPTIVE: the choices in force, one per tensor of the layout (one for a
 * compressor without a layout), into choices[0..n); n must be that
 * number. Before the first call every choice is full precision, since 0.
 * SHOAL_ERR_INVALID_ARG for another kind, a NULL choices or another n.
 * Local; not while a call is in flight. */
shoal_status_t shoal_compressor_choices(shoal_compressor_t comp,
                                        shoal_compress_choice_t *choices, size_t n);

/*
 * Compressed all-reduce of the compressor's count values of its dtype, in
 * place when sendbuf == recvbuf; op SHOAL_SUM or SHOAL_AVG. info (may be
 * NULL) is written when the call succeeds. One call per compressor at a
 * time. The non-blocking form returns a request (shoal_test, shoal_wait);
 * its buffers and info belong to the operation until it completes. Calls
 * go through the communicator's queue like any other collective, may be
 * used in groups, and a plain collective against them on another rank is
 * SHOAL_ERR_MISMATCH.
 */
shoal_status_t shoal_allreduce_compressed(shoal_compressor_t comp, const void *sendbuf,
                                          void *recvbuf, shoal_op_t op,
                                          shoal_compress_info_t *info);
shoal_status_t shoal_iallreduce_compressed(shoal_compressor_t comp, const void *sendbuf,
                                           void *recvbuf, shoal_op_t op,
                                           shoal_compress_info_t *info, shoal_request_t *req_p);

/*
 * Compressed collectives of sharded training and mixture-of-experts, each
 * on a compressor made for it (options.coll), count being the compressor's
 * count, dtype its dtype; in place where the plain call allows it (the
 * all-gather's sendbuf at recvbuf + rank x count; the reduce-scatter's
 * recvbuf at sendbuf + rank x count; the all-to-all's sendbuf == recvbuf).
 * Blocking and non-blocking as the all-reduce, and usable in groups.
 *
 * All-gather (INT8, INT4), for weights: each rank's count values are
 * encoded once, the bytes travel unchanged, and every rank (the owner too)
 * decodes them: recvbuf (nranks x count) is bitwise the same on every
 * rank. With error feedback the owner keeps what its encoding lost and
 * adds it to its next call's input, so that repeated gathers of a weight
 * carry it on average exactly; the owner's own values in sendbuf stay
 * untouched (QSDP's full-precision master copy).
 *
 * Reduce-scatter (INT8, INT4, SIGN; SUM or AVG), for gradients: sendbuf
 * holds nranks x count values, block j going to rank j, whose recvbuf gets
 * count values. TWO_SHOT (AUTO): each contribution is quantised once and
 * sent straight to its owner, which adds the decoded contributions to its
 * own exact values in fp32 in a fixed order. RING: each hop adds its own
 * values to the decoded partial sum and requantises it (n-2 times for a
 * block), the owner adding its own in fp32. Error feedback (on the
 * senders) keeps, per value of sendbuf, what its quantisation lost; the
 * owner's own block loses nothing (its residual is 0). Summed over the
 * ranks the residuals are the exact sum minus the result (for AVG minus
 * nranks times the result), up to fp32 rounding.
 *
 * All-to-all (INT8, INT4; no error feedback: tokens are not accumulated),
 * for mixture-of-experts: block j of sendbuf (count values) goes to rank j
 * encoded, and is decoded there; a rank's block to itself is copied
 * exactly. With more than one host, blocks to ranks of the same host go in
 * full precision and only blocks across hosts are encoded.
 */
shoal_status_t shoal_allgather_compressed(shoal_compressor_t comp, const void *sendbuf,
                                          void *recvbuf, shoal_compress_info_t *info);
shoal_status_t shoal_iallgather_compressed(shoal_compressor_t comp, const void *sendbuf,
                                           void *recvbuf, shoal_compress_info_t *info,
                                           shoal_request_t *req_p);
shoal_status_t shoal_reduce_scatter_compressed(shoal_compressor_t comp, const void *sendbuf,
                                               void *recvbuf, shoal_op_t op,
                                               shoal_compress_info_t *info);
shoal_status_t shoal_ireduce_scatter_compressed(shoal_compressor_t comp, const void *sendbuf,
                                                void *recvbuf, shoal_op_t op,
                                                shoal_compress_info_t *info,
                                                shoal_request_t *req_p);
shoal_status_t shoal_alltoall_compressed(shoal_compressor_t comp, const void *sendbuf,
                                         void *recvbuf, shoal_compress_info_t *info);
shoal_status_t shoal_ialltoall_compressed(shoal_compressor_t comp, const void *sendbuf,
                                          void *recvbuf, shoal_compress_info_t *info,
                                          shoal_request_t *req_p);

/*
 * The stream-ordered form of the all-reduce, for device tensors (INT8,
 * TERNARY and POWERSGD; SIGN, MAJORITY and INT4 are SHOAL_ERR_UNSUPPORTED
 * there until they have device kernels; TERNARY up to 127 ranks;
 * TERNARY and POWERSGD outside groups, where they are SHOAL_ERR_UNSUPPORTED:
 * each is two calls of its own): sendbuf and recvbuf are device (or
 * managed) memory of one device, and the call is queued on stream (a
 * CUstream; NULL: the legacy default stream) as the other _stream forms
 * are. The first such call moves the compressor's state (its residual) to
 * that device, where it stays: the compressor's later calls are all
 * stream-ordered, on buffers of that device, and queue one behind the
 * other on one stream (or streams the caller orders) without the host
 * waiting. Quantisation, error feedback and dequantisation run on the
 * device and only the compressed wire crosses to host memory; INT8's
 * schedule is the two-shot one (each contribution quantised once, each
 * owner's sum once), whatever the options' algo; TERNARY sums its codes
 * exactly, as on the host; POWERSGD's products run on the device through
 * cuBLAS (SHOAL_CUBLAS), and its results agree with the host path's to
 * their rounding. info is written by the
 * time the stream passes the call. Checkpoints wait for the stream and
 * move the residual from and to the device, in the host compressor's
 * format, so either kind restores the other's. A call that fails once its
 * stream side is queued leaves the device residual undefined: get_state
 * then says SHOAL_ERR_INVALID_ARG until set_state or reset.
 */
shoal_status_t shoal_allreduce_compressed_stream(shoal_compressor_t comp, const void *sendbuf,
                                                 void *recvbuf, shoal_op_t op,
                                                 shoal_compress_info_t *info, void *stream);
/*
 * The stream-ordered form of the compressed all-gather, for device
 * tensors (INT8; the other kinds are SHOAL_ERR_UNSUPPORTED there), with
 * the rules of shoal_allreduce_compressed_stream: the shard is encoded
 * (and its residual kept) on the device, only the wire crosses to host
 * memory, and every rank decodes every shard on its device, its own
 * included, to the bits the host form gives.
 */
shoal_status_t shoal_allgather_compressed_stream(shoal_compressor_t comp, const void *sendbuf,
                                                 void *recvbuf, shoal_compress_info_t *info,
                                                 void *stream);
/*
 * The stream-ordered forms of the compressed reduce-scatter and
 * all-to-all, for device tensors (INT8), with the same rules. The
 * reduce-scatter is the two-shot one whatever the options' algo: each
 * block encoded on the device for its owner (its residual kept there),
 * the wires exchanged through host memory, the owner adding them,
 * decoded, to its own exact block in fp32, in the order and to the bits
 * of the host form's two-shot. The all-to-all encodes each block for its
 * destination and decodes what arrives, on the device, to the host
 * form's bits.
 */
shoal_status_t shoal_reduce_scatter_compressed_stream(shoal_compressor_t comp,
                                                      const void *sendbuf, void *recvbuf,
                                                      shoal_op_t op, shoal_compress_info_t *info,
                                                      void *stream);
shoal_status_t shoal_alltoall_compressed_stream(shoal_compressor_t comp, const void *sendbuf,
                                                void *recvbuf, shoal_compress_info_t *info,
                                                void *stream);

/*
 * Stateless int8 all-reduce: INT8 with the default block, nearest
 * rounding and no error feedback, for any float32/float16/bfloat16
 * buffer, without a compressor. info may be NULL.
 */
shoal_status_t shoal_allreduce_int8(const void *sendbuf, void *recvbuf, size_t count,
                                    shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm,
                                    shoal_compress_info_t *info);

/*
 * Requests. shoal_test sets *done_p to 1 and frees the request (setting
 * *req to NULL) once the operation completed, returning its status; else
 * *done_p = 0 and SHOAL_OK. shoal_wait blocks until completion (bounded by
 * the operation's deadline), frees the request, sets *req to NULL and
 * returns the operation's status. shoal_wait_all waits for each of n
 * requests and returns the first failure (every request is freed). A NULL
 * or already completed request is SHOAL_ERR_INVALID_ARG, and so is
 * shoal_wait (or shoal_wait_all) on a request of the calling thread's
 * group before its shoal_group_end, which would never come (the request
 * stays pending). A request whose communicator was aborted or destroyed
 * completes with SHOAL_ERR_ABORTED.
 */
shoal_status_t shoal_test(shoal_request_t *req, int *done_p);
shoal_status_t shoal_wait(shoal_request_t *req);
shoal_status_t shoal_wait_all(size_t n, shoal_request_t *reqs);

#ifdef __cplusplus
}
#endif

#endif /* SHOAL_H */
