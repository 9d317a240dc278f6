/* Private to the CPU stand-in of the CUDA driver (libcuda_standin.so):
 * the objects behind cuda.h's opaque handles and the few functions the
 * stand-in's files call in one another. Nothing here is seen by its users,
 * who know only cuda.h and the two counters declared at the end.
 *
 * What the stand-in is and what it cannot show: tests/cuda/README and the
 * head comment of standin.c. */
#ifndef SHOAL_TESTS_CUDA_STANDIN_H
#define SHOAL_TESTS_CUDA_STANDIN_H

#include <cuda.h>

#include "cuda/kern.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Only cuda.h's functions and the two test hooks are exported; what the
 * stand-in's files share stays inside the library, so no caller can
 * come to depend on it. */
#pragma GCC visibility push(hidden)

#define STANDIN_MAX_DEVICES 16
/* Depth of a thread's context stack (cuCtxPushCurrent). */
#define STANDIN_CTX_DEPTH 32

/* Handles carry a tag in their first word, so that a stream passed where
 * an event is expected (or a stale handle whose memory was reused) is
 * answered with CUDA_ERROR_INVALID_HANDLE rather than misread. */
#define STANDIN_TAG_STREAM 0x5354524du /* "STRM" */
#define STANDIN_TAG_EVENT 0x45564e54u  /* "EVNT" */
#define STANDIN_TAG_MODULE 0x4d4f444cu /* "MODL" */
#define STANDIN_TAG_FUNC 0x46554e43u   /* "FUNC" */
#define STANDIN_TAG_PHYS 0x50485953u   /* "PHYS" */
#define STANDIN_TAG_DEAD 0xdeadu

/* Settings, read once by cuInit from the environment. */
typedef struct {
    int devices; /* SHOAL_STANDIN_DEVICES, default 1 */
    bool memops; /* stream memory operations; off with SHOAL_STANDIN_NO_MEMOPS=1 */
    bool p2p;    /* peer access between devices; off with SHOAL_STANDIN_NO_P2P=1 */
} standin_config_t;

/* A device's primary context. fault holds the first error raised by work
 * queued in the context (0 while none): a real GPU fault leaves the
 * context unusable, and every later call that waits on or queues work in
 * it returns the error. */
struct CUctx_st {
    int device;
    atomic_int retained;
    atomic_int fault;
};

/* Kinds of memory the table knows. */
typedef enum {
    STANDIN_MEM_DEVICE,  /* cuMemAlloc, or a peer's allocation opened by IPC */
    STANDIN_MEM_PINNED,  /* cuMemHostAlloc */
    STANDIN_MEM_MANAGED, /* cuMemAllocManaged */
} standin_mem_kind_t;

/* One allocation: [base, base + size). map_size is what was mapped (size
 * rounded up to pages); fd is the memfd behind device memory (-1 for the
 * other kinds), kept open so that another process can open it by IPC. */
typedef struct {
    uintptr_t base;
    size_t size;
    size_t map_size;
    standin_mem_kind_t kind;
    bool imported; /* mapped by cuIpcOpenMemHandle; closed by cuIpcCloseMemHandle */
    int device;
    CUcontext ctx;
    int fd;
    uint64_t id; /* unique in the process, never reused */
    struct standin_phys *phys; /* cuMemMap's: the physical allocation mapped here */
} standin_alloc_t;

/* Work queued on a stream. */
typedef enum {
    STANDIN_OP_COPY,
    STANDIN_OP_MEMSET,
    STANDIN_OP_KERNEL,
    STANDIN_OP_HOST_FN,
    STANDIN_OP_WRITE32,
    STANDIN_OP_WAIT32,
    STANDIN_OP_EVENT_RECORD,
    STANDIN_OP_EVENT_WAIT,
} standin_op_kind_t;

typedef enum {
    STANDIN_K_REDUCE,
    STANDIN_K_AVG,
    STANDIN_K_WAIT,
    STANDIN_K_WRITE,
    STANDIN_K_CODEC,
    STANDIN_K_CONVERT,
    STANDIN_K_ORTHO,
    STANDIN_K_COUNT,
} standin_kernel_t;

typedef struct standin_op {
    struct standin_op *next;
    standin_op_kind_t kind;
    CUcontext ctx; /* whose fault an error in this op sets */
    union {
        struct {
            void *dst;
            const void *src;
            size_t bytes;
        } copy;
        struct {
            void *dst;
            unsigned char value;
            size_t bytes;
        } memset;
        struct {
            standin_kernel_t which;
            union {
                shoal_k_reduce_t reduce;
                shoal_k_avg_t avg;
                shoal_k_wait_t wait;
                shoal_k_codec_t codec;
                shoal_k_convert_t convert;
                shoal_k_ortho_t ortho;
            } args; /* copied at launch, as the driver copies kernel parameters */
        } kernel;
        struct {
            CUhostFn fn;
            void *data;
        } host;
        struct {
            uint32_t *addr;
            uint32_t value;
            unsigned flags;
        } mem32;
        struct {
            CUevent event;
            uint64_t gen;
        } event;
    } u;
} standin_op_t;

/* A stream: an ordered queue that one worker thread runs. head stays on
 * the queue while it runs, so pending counts it and cuStreamQuery sees
 * the stream busy until the op is complete. ctx is NULL for the legacy
 * stream, whose ops carry the context they were queued in. */
struct CUstream_st {
    uint32_t tag;
    CUcontext ctx;
    pthread_mutex_t lock;
    pthread_cond_t work; /* the worker waits here for ops or stop */
    pthread_cond_t idle; /* synchronizers wait here for pending == 0 */
    standin_op_t *head, *tail;
    size_t pending;
    bool stop;
    pthread_t thread;
    struct CUstream_st *next; /* in the list of live streams */
};

/* An event. Each cuEventRecord takes a new generation (recorded); the
 * stream that reaches the record sets done to it. Ops that wait on the
 * event and the caller hold references, so that cuEventDestroy while work
 * still names the event frees it only when the last one lets go. */
struct CUevent_st {
    uint32_t tag;
    CUcontext ctx;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t recorded, done;
    int refs;
};

struct CUfunc_st {
    uint32_t tag;
    standin_kernel_t which;
    CUmodule module;
};

struct CUmod_st {
    uint32_t tag;
    CUcontext ctx;
    struct CUfunc_st funcs[STANDIN_K_COUNT];
};

/* standin.c: state, settings, contexts, errors. */
extern standin_config_t standin_config;
/* Set by the library's destructor: loops that wait on memory give up, so
 * that unloading never hangs on a wait nobody will release. */
extern atomic_bool standin_unloading;
bool standin_initialized(void);
CUcontext standin_ctx_current(void);
/* Device's primary context (NULL for no such device). */
CUcontext standin_ctx_of_device(int device);
bool standin_ctx_valid(CUcontext ctx);
/* The first error of work in ctx, or CUDA_SUCCESS. */
CUresult standin_ctx_fault(CUcontext ctx);
/* Records err as ctx's fault unless one is there; says what happened. */
void standin_ctx_set_fault(CUcontext ctx, CUresult err, const char *what);

/* standin_mem.c: the table of allocations. */
/* Copies the allocation that holds p into *a. */
bool standin_mem_find(uintptr_t p, standin_alloc_t *a);
CUresult standin_mem_insert(const standin_alloc_t *a);
/* Removes the allocation whose base is base if its kind is in kinds (a
 * bit mask of 1 << standin_mem_kind_t) and imported is as given. */
bool standin_mem_remove(uintptr_t base, unsigned kinds, bool imported, standin_alloc_t *a);
/* Whether [p, p + bytes) may be touched: inside one allocation of the
 * table, or (when device_only is false) mapped host memory. */
bool standin_mem_reachable(const void *p, size_t bytes, bool device_only);
uint64_t standin_mem_next_id(void);
/* The name of what descriptor fd of this process is ("/memfd:<name>
 * (deleted)" for a memfd), into buf; false when it cannot be read. */
bool standin_fd_name(int fd, char *buf, size_t len);

/* standin_stream.c: queues and their workers. */
/* The stream to queue on and the context the work belongs to: the legacy
 * stream (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) uses the calling
 * thread's current context. */
CUresult standin_stream_resolve(CUstream s, CUstream *q, CUcontext *ctx);
/* Queues op (from standin_op_new): the stream frees it once run. On
 * failure (the context has faulted) the caller still owns it. */
CUresult standin_stream_push(CUstream q, standin_op_t *op);
standin_op_t *standin_op_new(standin_op_kind_t kind, CUcontext ctx);
/* Waits until the legacy stream is idle. */
void standin_stream_sync_legacy(void);
/* Waits until every stream is idle (ctx NULL) or those of ctx and the
 * legacy stream are. */
void standin_stream_sync_all(CUcontext ctx);
/* Polls *addr until cond holds (a CU_STREAM_WAIT_VALUE_* operation), ctx
 * has faulted or the library unloads. */
void standin_wait_value(const volatile uint32_t *addr, uint32_t value, unsigned cond,
                        CUcontext ctx);

/* standin_kernel.c: runs a kernel op on the worker. */
void standin_kernel_run(standin_op_t *op);

#pragma GCC visibility pop

/* Test hooks, found by dlsym: kernel launches queued so far with name
 * (SHOAL_K_*, NULL for all), and peer allocations mapped now by
 * cuIpcOpenMemHandle in this process. */
unsigned long shoal_standin_launches(const char *name);
unsigned long shoal_standin_ipc_open_count(void);
/* Physical allocations imported from a descriptor (cuMemImportFrom-
 * ShareableHandle) in this process so far. */
unsigned long shoal_standin_vmm_imports(void);

#endif
