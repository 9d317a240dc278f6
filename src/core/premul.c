/* Pre-multiplied sums: ops created on a communicator, numbered from
 * SHOAL_OP_COUNT up. A call with one scales its input by the scalar
 * (shoal_premul_scale) and then runs as a plain SUM. */
#include "exec.h"

#include "algos/reduce.h"
#include "base/dtype.h"

#include <stdlib.h>
#include <string.h>

/* The PROD kernel does the scaling with the same rounding as every other
 * op; the scalar is repeated over a block so that the kernel sees arrays. */
#define PREMUL_BLOCK 256

void shoal_premul_scale(void *dst, const void *src, size_t count, shoal_dtype_t dtype,
                        const void *scalar)
{
    size_t es = shoal_dtype_bytes(dtype);
    unsigned char rep[PREMUL_BLOCK * 8];
    for (size_t i = 0; i < PREMUL_BLOCK; i++)
        memcpy(rep + i * es, scalar, es);
    shoal_reduce_fn_t prod = shoal_reduce_fn(dtype, SHOAL_PROD);
    for (size_t off = 0; off < count; off += PREMUL_BLOCK) {
        size_t n = count - off < PREMUL_BLOCK ? count - off : PREMUL_BLOCK;
        prod((char *)dst + off * es, (const char *)src + off * es, rep, n);
    }
}

/* by_ref: keep the pointer and read the scalar whenever a call runs (the
 * NCCL door's ncclScalarDevice), instead of copying it now. */
static shoal_status_t premul_create(shoal_comm_t comm, const void *scalar, shoal_dtype_t dtype,
                                    int by_ref, shoal_op_t *op_p)
{
    static const char what[] = "shoal_op_create_premul_sum";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    size_t es = shoal_dtype_bytes(dtype);
    if (!scalar || !op_p)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: %s is NULL", what,
                            scalar ? "op_p" : "scalar");
    else if (es == 0)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: unknown dtype %d", what,
                            (int)dtype);
    int i = 0;
    while (s == SHOAL_OK && i < comm->npremul && comm->premul[i].used)
        i++;
    /* The bitwise ops' values come after the last possible one. */
    if (s == SHOAL_OK && i == SHOAL_BAND - SHOAL_OP_COUNT)
        s = shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: %d pre-multiplied sums are live, "
                            "the most a communicator holds", what, i);
    if (s == SHOAL_OK && i == comm->npremul) {
        int ncap = comm->npremul ? comm->npremul * 2 : 8;
        shoal_premul_t *p = realloc(comm->premul, (size_t)ncap * sizeof(*p));
        if (!p) {
            s = shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: out of memory", what);
        } else {
            memset(p + comm->npremul, 0, (size_t)(ncap - comm->npremul) * sizeof(*p));
            comm->premul = p;
            comm->npremul = ncap;
        }
    }
    if (s == SHOAL_OK) {
        shoal_premul_t *p = &comm->premul[i];
        p->used = 1;
        p->dtype = dtype;
        memset(p->scalar, 0, sizeof(p->scalar));
        memcpy(p->scalar, scalar, es);
        p->ref = by_ref ? scalar : NULL;
        *op_p = (shoal_op_t)(SHOAL_OP_COUNT + i);
    }
    shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_op_create_premul_sum(shoal_comm_t comm, const void *scalar,
                                          shoal_dtype_t dtype, shoal_op_t *op_p)
{
    return premul_create(comm, scalar, dtype, 0, op_p);
}

shoal_status_t shoal_op_create_premul_sum_ref(shoal_comm_t comm, const void *scalar,
                                              shoal_dtype_t dtype, shoal_op_t *op_p)
{
    return premul_create(comm, scalar, dtype, 1, op_p);
}

shoal_status_t shoal_op_destroy(shoal_op_t op, shoal_comm_t comm)
{
    static const char what[] = "shoal_op_destroy";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    int i = (int)op - SHOAL_OP_COUNT;
    if ((int)op < SHOAL_OP_COUNT || i >= comm->npremul || !comm->premul[i].used)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                            "%s: op %d is not a live pre-multiplied sum of this communicator",
                            what, (int)op);
    else
        comm->premul[i].used = 0;
    shoal_comm_leave(comm);
    return s;
}
