/* Algorithms: each is one static const ops table. plan() does the work
 * that depends only on the call's shape (neighbours, piece sizes, kernels);
 * run() moves the data and may be repeated with the same plan. */
#ifndef SHOAL_ALGO_H
#define SHOAL_ALGO_H

#include "core/comm.h"
#include "prims.h"

typedef struct {
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    shoal_dtype_t dtype;
    shoal_op_t op;
    int root;             /* rooted collectives; 0 elsewhere */
} shoal_coll_args_t;

typedef struct {
    shoal_coll_args_t args;
    shoal_prims_t prims;
    size_t esize;
    size_t piece_elems;   /* elements per pipeline piece (chunk_size / esize) */
} shoal_plan_t;

typedef struct {
    size_t size; /* sizeof(shoal_algo_ops_t) */
    const char *name;
    /* Estimated seconds for args on comm, for selection; < 0: cannot run. */
    double (*cost)(const struct shoal_comm *comm, const shoal_coll_args_t *args);
    shoal_status_t (*plan)(struct shoal_comm *comm, const shoal_coll_args_t *args,
                           shoal_plan_t *plan_p);
    shoal_status_t (*run)(shoal_plan_t *plan);
} shoal_algo_ops_t;

extern const shoal_algo_ops_t shoal_ring_allreduce_ops;

/* Plan of the ring algorithms that reduce (all-reduce, reduce-scatter):
 * neighbours rank+-1, pieces of chunk_size, the op's kernel, AVG over n. */
shoal_status_t shoal_ring_reduce_plan(struct shoal_comm *comm, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan);
extern const shoal_algo_ops_t shoal_chain_broadcast_ops, shoal_chain_reduce_ops;
extern const shoal_algo_ops_t shoal_ring_reduce_scatter_ops, shoal_ring_allgather_ops;

/* The all-reduce algorithm for args: SHOAL_ALGO if set (NULL and a logged
 * reason when it names none that can run), else the cheapest by cost. */
const shoal_algo_ops_t *shoal_algo_select_allreduce(const struct shoal_comm *comm,
                                                    const shoal_coll_args_t *args);

#endif
