/*
 * shoal's NCCL door: the NCCL 2.30 API, served by shoal.
 *
 * Names, values, struct layouts and prototypes are those of NCCL 2.30.7, so a
 * program built against NCCL runs on shoal's libnccl.so.2 unchanged (through
 * LD_PRELOAD or LD_LIBRARY_PATH), and a program built against this header
 * runs on NCCL. Every function exists twice: ncclX (weak) and pncclX
 * (strong, same address), so that profilers may interpose ncclX and call on.
 *
 * SHOAL_NCCL_API_VERSION selects the API declared: 23007 (the default) or
 * 22809, NCCL 2.28.9's header exactly (its ncclConfig_t, results and
 * functions). The library serves both: it reads a config only as far as
 * the caller's config->size reaches, so a program built against 2.28.9
 * keeps working unchanged; ncclGetVersion answers 23007.
 *
 * What shoal adds: buffers may be host memory. With host buffers and a NULL
 * stream a call completes before it returns (inside a group: at
 * ncclGroupEnd). Without CUDA support in the library, a pointer that is not
 * host memory of this process is ncclInvalidArgument, and ncclGetLastError
 * says why. Every blocking wait has a deadline (SHOAL_TIMEOUT), so a
 * vanished peer gives ncclRemoteError instead of a hang.
 *
 * The header needs no CUDA header: without one, cudaStream_t is declared as
 * CUDA declares it, and any value (NULL included) may be passed.
 */
#ifndef SHOAL_NCCL_H
#define SHOAL_NCCL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#ifndef SHOAL_NCCL_API_VERSION
#define SHOAL_NCCL_API_VERSION 23007
#endif
#if SHOAL_NCCL_API_VERSION != 23007 && SHOAL_NCCL_API_VERSION != 22809
#error "SHOAL_NCCL_API_VERSION is 23007 (NCCL 2.30.7) or 22809 (NCCL 2.28.9)"
#endif
#define SHOAL_NCCL_2_30 (SHOAL_NCCL_API_VERSION >= 23000)

#if defined(__CUDACC__) || defined(SHOAL_NCCL_USE_CUDA)
#include <cuda_runtime.h>
#elif !defined(__CUDA_RUNTIME_H__) && !defined(__DRIVER_TYPES_H__)
/* The same declaration as CUDA's driver_types.h, so including it later is a
 * compatible redeclaration. */
typedef struct CUstream_st *cudaStream_t;
#endif

#define NCCL_MAJOR 2
#if SHOAL_NCCL_2_30
#define NCCL_MINOR 30
#define NCCL_PATCH 7
#define NCCL_VERSION_CODE 23007
#else
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION_CODE 22809
#endif
#define NCCL_SUFFIX ""
/* Versions up to 2.8 used two digits for the minor number, later ones three. */
#define NCCL_VERSION(X, Y, Z) \
    (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handles. */
typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* Rendezvous token made by ncclGetUniqueId: rank 0's address and a random
 * secret that every connection must prove. Treat it as a password. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6, /* a peer died, disconnected or missed the deadline */
    ncclInProgress = 7,  /* non-blocking communicator: poll ncclCommGetAsyncError */
#if SHOAL_NCCL_2_30
    ncclTimeout = 8,     /* ncclWaitSignal: the deadline passed */
    ncclNumResults = 9
#else
    ncclNumResults = 8
#endif
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

#if SHOAL_NCCL_2_30
/* ncclConfig_t.magic (NCCL_CONFIG_INITIALIZER's). */
#define NCCL_API_MAGIC 0xcafebeef
#endif

/* ncclCommWindowRegister flags and alignment. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#if SHOAL_NCCL_2_30
/* One-sided puts on the window land in the order they were issued. */
#define NCCL_WIN_STRICT_ORDERING 0x02
#endif
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy values (GPU scheduling; no effect on host memory). */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00 /* the parent stays as it is */
#define NCCL_SHRINK_ABORT 0x01   /* stop the parent's operations first (after a failure) */

/* ncclCommRevoke flags: none defined; pass 0. */
#define NCCL_REVOKE_DEFAULT 0x00

/*
 * Communicator settings. Start from NCCL_CONFIG_INITIALIZER and set fields:
 * the library reads `size` first and never looks past it, so a program
 * built with an older, shorter struct keeps working. A wrong magic is
 * ncclInvalidArgument. shoal honours `blocking` (0: calls return
 * ncclInProgress and ncclCommGetAsyncError reports completion) and
 * `commName` (used in log lines); the GPU scheduling fields are accepted
 * and have no effect on host memory.
 */
#if SHOAL_NCCL_2_30
typedef struct ncclConfig_v23000 {
#else
typedef struct ncclConfig_v22800 {
#endif
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
#if SHOAL_NCCL_2_30
    /* 2.30: CUDA graph and one-sided settings, accepted, no effect here. */
    int graphUsageMode;
    int numRmaCtx;
    int maxP2pPeers;
    int graphStreamOrdering;
#endif
} ncclConfig_t;

#if SHOAL_NCCL_2_30
#define SHOAL_NCCL_CONFIG_2_30_FIELDS                                                    \
        NCCL_CONFIG_UNDEF_INT,                         /* graphUsageMode */              \
        NCCL_CONFIG_UNDEF_INT,                         /* numRmaCtx */                   \
        NCCL_CONFIG_UNDEF_INT,                         /* maxP2pPeers */                 \
        NCCL_CONFIG_UNDEF_INT,                         /* graphStreamOrdering */
#else
#define SHOAL_NCCL_CONFIG_2_30_FIELDS
#endif

#define NCCL_CONFIG_INITIALIZER                                                          \
    {                                                                                    \
        sizeof(ncclConfig_t),                          /* size */                        \
        0xcafebeef,                                    /* magic */                       \
        NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */                  \
        NCCL_CONFIG_UNDEF_INT,                         /* blocking */                    \
        NCCL_CONFIG_UNDEF_INT,                         /* cgaClusterSize */              \
        NCCL_CONFIG_UNDEF_INT,                         /* minCTAs */                     \
        NCCL_CONFIG_UNDEF_INT,                         /* maxCTAs */                     \
        NCCL_CONFIG_UNDEF_PTR,                         /* netName */                     \
        NCCL_CONFIG_UNDEF_INT,                         /* splitShare */                  \
        NCCL_CONFIG_UNDEF_INT,                         /* trafficClass */                \
        NCCL_CONFIG_UNDEF_PTR,                         /* commName */                    \
        NCCL_CONFIG_UNDEF_INT,                         /* collnetEnable */               \
        NCCL_CONFIG_UNDEF_INT,                         /* CTAPolicy */                   \
        NCCL_CONFIG_UNDEF_INT,                         /* shrinkShare */                 \
        NCCL_CONFIG_UNDEF_INT,                         /* nvlsCTAs */                    \
        NCCL_CONFIG_UNDEF_INT,                         /* nChannelsPerNetPeer */         \
        NCCL_CONFIG_UNDEF_INT,                         /* nvlinkCentricSched */          \
        SHOAL_NCCL_CONFIG_2_30_FIELDS                                                    \
    }

/* ncclGroupSimulateEnd's answer: the cost model's estimate in seconds. */
typedef struct ncclSimInfo_v22200 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                                        \
    {                                                                                    \
        sizeof(ncclSimInfo_t),                         /* size */                        \
        0x74685283,                                    /* magic */                       \
        NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */                  \
        NCCL_UNDEF_FLOAT                               /* estimatedTime */               \
    }

/* Memory for buffers: page-aligned host memory here (there is no device). */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t pncclMemAlloc(void **ptr, size_t size);
/* Free memory from ncclMemAlloc; any other pointer is ncclInvalidArgument. */
ncclResult_t ncclMemFree(void *ptr);
ncclResult_t pncclMemFree(void *ptr);

/* The version of the API served, 23007 (whichever SHOAL_NCCL_API_VERSION
 * the program was built with); shoal's own version is logged. */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t pncclGetVersion(int *version);

/* A new id; the calling process must host rank 0 (a child forked after the
 * call qualifies). With NCCL_COMM_ID=host:port every rank builds the same
 * id locally and rank 0 listens on that address. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId);

/* Form a communicator; collective over nranks ranks (inside a group: at
 * ncclGroupEnd, all the group's inits together). config may be NULL. */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                     int rank, ncclConfig_t *config);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);

/* ndev ranks in this process (one thread each while forming them); devlist
 * may be NULL, and its entries must be distinct and non-negative. */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);

/* Wait for the communicator's outstanding operations. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);

/* Free a communicator (finalizing it first if needed). */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);

/* Stop and free a communicator at once, whatever its peers do. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

/* Stop the communicator's operations; afterwards only shrink, destroy and
 * abort are allowed. revokeFlags must be NCCL_REVOKE_DEFAULT. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* Ranks of one color form a new communicator ordered by (key, rank);
 * NCCL_SPLIT_NOCOLOR gives *newcomm = NULL. Collective over comm. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config);

/* The ranks not listed form a new communicator, in their old order; the
 * listed ones do not take part and may be dead. Collective over the rest. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                             ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);

#if SHOAL_NCCL_2_30
/* Grow (2.30). The id of comm's next grow: every rank of comm gets the
 * same one (derived from comm's secret), so any of them may hand it to the
 * new ranks; it is a password. Once comm has grown (or tried to), the
 * next id differs. */
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
/* comm's ranks and nRanks - size(comm) new ones form *newcomm; comm's
 * ranks keep their numbers, the new ones take the rest. Collective over
 * all nRanks: comm's ranks pass comm, rank -1 and the id or NULL; a new
 * rank passes comm NULL, the id and its rank. comm stays usable. A new
 * rank that never comes fails the others at the deadline (SHOAL_TIMEOUT),
 * naming it. Blocking. config NULL: comm's settings (a new rank's
 * defaults). */
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                          ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                           ncclComm_t *newcomm, ncclConfig_t *config);
#endif

/* Like ncclCommInitRankConfig with nId ids made by different ranks; shoal
 * rendezvouses on commIds[0], which rank 0's process must have made. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId *commIds, ncclConfig_t *config);

/* NCCL's text for a result code (static). */
const char *ncclGetErrorString(ncclResult_t result);
const char *pncclGetErrorString(ncclResult_t result);

/* The reason of the last failure on comm, or of this thread when comm is
 * NULL or not a communicator; "" if none. Valid until the next call. */
const char *ncclGetLastError(ncclComm_t comm);
const char *pncclGetLastError(ncclComm_t comm);

/* Re-read the logging settings. */
__attribute__((deprecated("ncclResetDebugInit is not supported as part of the NCCL API and will be removed in the future")))
void ncclResetDebugInit(void);
__attribute__((deprecated("pncclResetDebugInit is not supported as part of the NCCL API and will be removed in the future")))
void pncclResetDebugInit(void);

/* ncclSuccess, ncclInProgress while a non-blocking communicator's init or
 * operations are under way, or the error that broke the communicator. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int *count);
/* No CUDA device backs a host-memory communicator: ncclInvalidUsage. */
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank);

/* Register a buffer with comm (kept for transports that use registered
 * memory); the handle is released by ncclCommDeregister or destroy. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle);

/* A registration that every rank makes together (collective over comm);
 * winFlags NCCL_WIN_DEFAULT or NCCL_WIN_COLL_SYMMETRIC (same size on every
 * rank). */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                     ncclWindow_t *win, int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
#if SHOAL_NCCL_2_30
/* Suspend (2.30): the calls made so far finish, then every call but
 * resume, the statistics, destroy and abort is refused until
 * ncclCommResume. NCCL_SUSPEND_MEM also gives back the staging of
 * stream-ordered calls (its device scratch included), made again on
 * demand; a stream that has not reached a staged call of the
 * communicator yet makes it ncclInvalidUsage, suspending nothing. The
 * door's compressors (SHOAL_COMPRESS) keep their device memory. */
#define NCCL_SUSPEND_MEM 0x01
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);
/* Device memory of the communicator, in bytes: what suspend releases (the
 * staging's), whether it is suspended (0 or 1), what it keeps (the door's
 * compressors'), and the total. Host memory is not counted. */
typedef enum {
    ncclStatGpuMemSuspend = 0,
    ncclStatGpuMemSuspended = 1,
    ncclStatGpuMemPersist = 2,
    ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);
/* The buffer win was registered with (2.30). */
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);
#endif

/* Reduction operations; values from ncclNumOps up are made by
 * ncclRedOpCreatePreMulSum. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4, /* integers: the sum divided by nranks, truncated */
    ncclNumOps = 5,
    /* The largest value the enum can hold, so that it is int-sized. */
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

/* Where a pre-multiplied sum's scalar lives: ncclScalarHostImmediate reads
 * it once, at creation; ncclScalarDevice keeps the pointer and reads it each
 * time a collective with the op runs (with host memory, any readable
 * pointer). */
typedef enum {
    ncclScalarDevice = 0,
    ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/* A sum of scalar * input over the ranks; the op belongs to comm and serves
 * buffers of datatype only. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/*
 * Collectives. Counts are elements; NCCL's in-place rules apply (all-gather:
 * sendbuff == recvbuff + rank * sendcount; reduce-scatter: recvbuff ==
 * sendbuff + rank * recvcount; others: sendbuff == recvbuff). Every rank
 * must make the same calls in the same order.
 */

/* recvbuff on root = op over the ranks of sendbuff. */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);

/* In-place broadcast of root's buff. */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);

/* recvbuff on every rank = sendbuff of root. */
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);

/* recvbuff on every rank = op over the ranks of sendbuff. */
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);

/* recvbuff (recvcount) = op over the ranks of block `rank` of sendbuff. */
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);

/* Block r of recvbuff = sendbuff (sendcount) of rank r. */
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Block j (count) of sendbuff goes to rank j; block j of recvbuff comes
 * from rank j. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Block r of root's recvbuff = sendbuff (count) of rank r. */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream);

/* recvbuff (count) of rank r = block r of root's sendbuff. */
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream);

/* Point to point; the n-th send from a to b meets the n-th receive of b
 * from a. Two ranks that send to each other put the pair in a group. */
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

/* Groups: the calling thread's calls between start and end run together at
 * the outermost end (fused, any send/receive order completes). */
ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);

/* End the group without running it; simInfo->estimatedTime gets the cost
 * model's estimate of the group, in seconds. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

#if SHOAL_NCCL_2_30
/*
 * One-sided (2.30), on windows of host or device memory (device memory is
 * copied through the host, by a stream of shoal's own). ncclPutSignal writes count
 * elements from localbuff, which lies in a window this rank registered
 * with NCCL_WIN_COLL_SYMMETRIC, at byte peerWinOffset of peer's part of
 * peerWin, then counts one signal at peer; ncclSignal counts one signal
 * alone; ncclWaitSignal returns once each descriptor's opCnt signals from
 * its peer came (beyond those earlier waits consumed) and consumes them.
 * The signals of one rank arrive in the order it issued them, each behind
 * its put's bytes, so the bytes of every put whose signal a wait consumed
 * are in place when it returns. sigIdx, ctx and flags are 0 (NCCL's only
 * values). A wait not satisfied within SHOAL_TIMEOUT is ncclTimeout, naming
 * the peer. With a stream in a process that uses CUDA, the stream is
 * synchronised first and the call completes before it returns.
 */
ncclResult_t ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype,
                           int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                           int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype,
                            int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                            int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                         cudaStream_t stream);
typedef struct {
    int opCnt;  /* signals to wait for */
    int peer;   /* from this rank */
    int sigIdx; /* 0 */
    int ctx;    /* 0 */
} ncclWaitSignalDesc_t;
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                             cudaStream_t stream);
#endif

#if SHOAL_NCCL_2_30
/*
 * Parameters (2.30): shoal's settings, named by their SHOAL_ name or their
 * NCCL alias (NCCL_DEBUG...), with the values the library holds (from the
 * variable, the alias or the default). Typed reads give the number shoal
 * uses (a size in bytes, a time in nanoseconds, y/n as 1 or 0); a value
 * that does not fit, or a setting that is not a number, is
 * ncclInvalidArgument. ncclParamGet copies that number's bytes, or the
 * text with its NUL. Strings stay valid until the same call on the same
 * thread. ncclParamDumpAll logs every setting at INFO.
 */
typedef struct ncclParamHandle *ncclParamHandle_t;
ncclResult_t ncclParamBind(ncclParamHandle_t *out, const char *key);
ncclResult_t pncclParamBind(ncclParamHandle_t *out, const char *key);
ncclResult_t ncclParamGetI8(ncclParamHandle_t h, int8_t *out);
ncclResult_t pncclParamGetI8(ncclParamHandle_t h, int8_t *out);
ncclResult_t ncclParamGetI16(ncclParamHandle_t h, int16_t *out);
ncclResult_t pncclParamGetI16(ncclParamHandle_t h, int16_t *out);
ncclResult_t ncclParamGetI32(ncclParamHandle_t h, int32_t *out);
ncclResult_t pncclParamGetI32(ncclParamHandle_t h, int32_t *out);
ncclResult_t ncclParamGetI64(ncclParamHandle_t h, int64_t *out);
ncclResult_t pncclParamGetI64(ncclParamHandle_t h, int64_t *out);
ncclResult_t ncclParamGetU8(ncclParamHandle_t h, uint8_t *out);
ncclResult_t pncclParamGetU8(ncclParamHandle_t h, uint8_t *out);
ncclResult_t ncclParamGetU16(ncclParamHandle_t h, uint16_t *out);
ncclResult_t pncclParamGetU16(ncclParamHandle_t h, uint16_t *out);
ncclResult_t ncclParamGetU32(ncclParamHandle_t h, uint32_t *out);
ncclResult_t pncclParamGetU32(ncclParamHandle_t h, uint32_t *out);
ncclResult_t ncclParamGetU64(ncclParamHandle_t h, uint64_t *out);
ncclResult_t pncclParamGetU64(ncclParamHandle_t h, uint64_t *out);
ncclResult_t ncclParamGetStr(ncclParamHandle_t h, const char **out);
ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char **out);
ncclResult_t ncclParamGet(ncclParamHandle_t h, void *out, int maxLen, int *len);
ncclResult_t pncclParamGet(ncclParamHandle_t h, void *out, int maxLen, int *len);
ncclResult_t ncclParamGetParameter(const char *key, const char **value, int *valueLen);
ncclResult_t pncclParamGetParameter(const char *key, const char **value, int *valueLen);
ncclResult_t ncclParamGetAllParameterKeys(const char ***table, int *tableLen);
ncclResult_t pncclParamGetAllParameterKeys(const char ***table, int *tableLen);
void ncclParamDumpAll(void);
void pncclParamDumpAll(void);
#endif

#ifdef __cplusplus
}
#endif

#endif /* SHOAL_NCCL_H */
