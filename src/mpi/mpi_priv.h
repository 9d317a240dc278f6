/* What the MPI door's files share (src/mpi/). */
#ifndef SHOAL_MPI_PRIV_H
#define SHOAL_MPI_PRIV_H

#include "shoal.h"

#include "base/config.h"
#include "base/log.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The MPI the door is built for: "Open MPI" or "MPICH", found in
 * MPI_Get_library_version's text. */
#ifdef OPEN_MPI
#define SHOAL_MPI_NAME "Open MPI"
#else
#define SHOAL_MPI_NAME "MPICH"
#endif

/* The collectives the door serves, as the program calls them (each also
 * non-blocking). */
typedef enum {
    DOOR_ALLREDUCE,
    DOOR_REDUCE,
    DOOR_BCAST,
    DOOR_ALLGATHER,
    DOOR_REDUCE_SCATTER_BLOCK,
    DOOR_REDUCE_SCATTER, /* unequal blocks (tmp set) run as an all-reduce */
    DOOR_ALLTOALL,
    DOOR_ALLTOALLV,
    DOOR_GATHER,
    DOOR_SCATTER,
    DOOR_BARRIER,
    DOOR_NKINDS
} door_kind_t;

/* SHOAL_MPI_PATH=auto's choice for one collective and size class of a
 * communicator (rule.c). */
enum { DOOR_PATH_LEARN, DOOR_PATH_SHOAL, DOOR_PATH_MPI };
#define DOOR_NCLASSES 48 /* 0 B, then powers of two up to 2^46 B */
typedef struct {
    int path;    /* DOOR_PATH_LEARN until chosen */
    int calls;   /* blocking calls seen while learning */
    int failed;  /* a run of shoal's path failed on this rank while learning */
    double t[2]; /* this rank's best timed call, s (0: none yet): [0] MPI's path, [1] shoal's */
    double t2[2];   /* the second best, likewise */
    int rounds[2];  /* timed rounds on each path */
} door_class_t;

/* The door's side of an MPI communicator (its attribute). */
typedef struct {
    shoal_comm_t comm; /* NULL: its calls pass through */
    atomic_int refs;   /* the attribute's and each call in flight's */
    door_class_t rule[DOOR_NKINDS][DOOR_NCLASSES];
} door_comm_t;

/* One taken call, in shoal's terms (call.c). Buffers, counts and roots
 * follow shoal.h's conventions (in place as shoal spells it); what a call
 * owns (v, tmp) is freed by shoal_mpi_call_finish. */
typedef struct door_call door_call_t;
struct door_call {
    door_kind_t kind;
    int nb;           /* the non-blocking form */
    const char *what; /* "MPI_Allreduce", "MPI_Iallreduce", ...: set by shoal_mpi_take */
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* elements per rank's block (the whole vector for all-reduce, reduce, bcast) */
    shoal_dtype_t dt;
    shoal_op_t op;
    int root;
    size_t *v;    /* all-to-all-v: sendcounts, sdispls, recvcounts, rdispls; nranks each */
    void *tmp;    /* unequal reduce-scatter: the whole reduced vector, before this rank's part */
    void *move_to; /* after completion: move_len bytes from move_from to here */
    const void *move_from;
    size_t move_len;
    int compress; /* SHOAL_COMPRESS takes this all-reduce */
    MPI_Comm mpi;
    door_comm_t *dc;
    shoal_comm_t comm;
    door_class_t *learn; /* a call SHOAL_MPI_PATH=auto times: its class */
    int learn_timed;     /* its time counts (not a class's first call on a path) */
    int learn_last;      /* the class chooses once it completes */
    uint64_t t0_ns;
    /* The arguments MPI took (m), where keyed. A blocking call that
     * SHOAL_MPI_PATH=auto may run again, on either path, while its class
     * learns (rule.c) has an again, which runs it once more on the path
     * named: one whose result does not depend on what its output held
     * before (not in place, nothing owned). */
    int keyed;
    int (*again)(const door_call_t *k, int shoal);
    struct {
        const void *sb;
        void *rb;
        int scount, rcount;
        MPI_Datatype st, rt;
        MPI_Op op;
        int root;
    } m;
};

/* A call of kind with every other field cleared, field by field: an
 * initializer of the whole struct compiles to a string instruction (rep
 * stos) whose start-up alone cost a passed-through 8-byte MPI_Allreduce
 * 20 ns of the door's 40. */
static inline void door_call_begin(door_call_t *k, door_kind_t kind, const MPI_Request *req)
{
    k->kind = kind;
    k->nb = req != NULL;
    k->what = NULL;
    k->sendbuf = NULL;
    k->recvbuf = NULL;
    k->count = 0;
    k->dt = SHOAL_INT8;
    k->op = SHOAL_SUM;
    k->root = 0;
    k->v = NULL;
    k->tmp = NULL;
    k->move_to = NULL;
    k->move_from = NULL;
    k->move_len = 0;
    k->compress = 0;
    k->mpi = MPI_COMM_NULL;
    k->dc = NULL;
    k->comm = NULL;
    k->learn = NULL;
    k->learn_timed = 0;
    k->learn_last = 0;
    k->t0_ns = 0;
    k->keyed = 0; /* m is read only where keyed or through again */
    k->again = NULL;
}

/* The blocking calls that SHOAL_MPI_PATH=auto passed to MPI, the last per
 * kind and thread (door.c): a call of the same communicator, count, type
 * and op falls in the same size class, whose choice never changes, and
 * passes at once from its entry point (coll.c), before the door's own
 * work: a passed 8-byte all-reduce on 2 ranks then costs what it costs
 * without the door. The generations forget them with the communicator
 * (shoal_mpi_comm_gen, moved on by each freed one) and with the settings.
 * At SHOAL_DEBUG=info such a call is counted (call.c); at debug, which
 * logs each call, none is kept (shoal_mpi_memo_keep). */
typedef struct {
    MPI_Comm c;
    MPI_Datatype t;
    MPI_Op op;
    int count;
    unsigned gen, settings;
} door_memo_t;
extern _Thread_local __attribute__((tls_model("initial-exec"))) door_memo_t
    shoal_mpi_memo[DOOR_NKINDS];
extern atomic_uint shoal_mpi_comm_gen;
void shoal_mpi_count_at_once(door_kind_t kind);

/* Whether a blocking call of kind on c passes to MPI at once. */
static inline int shoal_mpi_memo_passes(door_kind_t kind, MPI_Comm c, int count,
                                        MPI_Datatype t, MPI_Op op)
{
    const door_memo_t *m = &shoal_mpi_memo[kind];
    if (m->c != c || m->count != count || m->t != t || m->op != op ||
        m->gen != atomic_load_explicit(&shoal_mpi_comm_gen, memory_order_acquire) ||
        m->settings != shoal_config_generation())
        return 0;
    if (shoal_log_level >= SHOAL_LOG_INFO)
        shoal_mpi_count_at_once(kind);
    return 1;
}

/* door.c: keep k as the last call of its kind passed to MPI. */
int shoal_mpi_ready(void);
void shoal_mpi_memo_keep(const door_call_t *k);
door_comm_t *shoal_mpi_comm(MPI_Comm c);
void shoal_mpi_comm_hold(door_comm_t *d);
void shoal_mpi_comm_put(door_comm_t *d);
int shoal_mpi_fail(MPI_Comm c, shoal_comm_t comm, const char *what, shoal_status_t s);
int shoal_mpi_comm_size(MPI_Comm c);
int shoal_mpi_comm_rank(MPI_Comm c);

/* mpi_types.c: whether the MPI in the process is SHOAL_MPI_NAME; shoal's
 * type and op for a reduction of MPI's predefined ones (0: none, the call
 * passes through). shoal_mpi_bytes: a predefined type without gaps, as
 * bytes (*es_p: its size), for the calls that only move data. */
int shoal_mpi_is_ours(void);
int shoal_mpi_reduction(MPI_Datatype t, MPI_Op op, shoal_dtype_t *dt_p, shoal_op_t *op_p);
int shoal_mpi_bytes(MPI_Datatype t, size_t *es_p);

/* call.c: the shoal communicator of a call when the door takes it (NULL:
 * it goes to MPI), counted and logged; the return of a call passed to MPI
 * (rc, its PMPI_* call's), once it is back; run a call (blocking when req_p is
 * NULL); finish it once it completed (the copies it owes, the memory it
 * owns); the whole of a blocking call. */
shoal_comm_t shoal_mpi_take(door_call_t *k, MPI_Comm c, int ok);
int shoal_mpi_passed(door_call_t *k, int rc);
void shoal_mpi_log_counts(void);
shoal_status_t shoal_mpi_call_issue(door_call_t *k, shoal_request_t *req_p);
void shoal_mpi_call_finish(door_call_t *k, int ok);
int shoal_mpi_call_run(door_call_t *k, MPI_Request *req);

/* rule.c: SHOAL_MPI_PATH=auto. Whether a call that shoal can serve takes
 * shoal's path (1) or MPI's (0), by its class's choice. While the class
 * learns, a call with again first learns all of it, running itself on
 * both paths (collective over k->mpi); other calls take the paths by turns
 * (k->learn set: the call is timed). The end of such a call, on shoal's
 * path or not (collective over k->mpi after a class's last timed call).
 * shoal_mpi_rule_again: this thread's call is such a run again of a
 * learning call on shoal's path (not counted; a failure skips MPI's
 * error handler). */
int shoal_mpi_rule_take(door_call_t *k);
void shoal_mpi_rule_done(door_call_t *k, int shoal);
int shoal_mpi_rule_again(void);
/* SHOAL_TEST_MPI_SLOW's lag, charged where a call enters its path (shoal
 * 1, MPI 0). */
void shoal_mpi_rule_test_lag(const door_call_t *k, int shoal);

/* request.c: a non-blocking call's MPI request (a generalized request
 * that completes when shoal's does); *k is copied. */
int shoal_mpi_request_start(const door_call_t *k, shoal_request_t sr, MPI_Request *req);

#endif
