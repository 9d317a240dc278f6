/* SHOAL_COMPRESS=int8 on device buffers: the door's float all-reduces on
 * device memory go through the stream-ordered compressed all-reduce
 * (shoal_allreduce_compressed_stream), as its host all-reduces go through
 * shoal_allreduce_int8. Stateless as that one (no error feedback, nearest
 * rounding, the default block), but through compressors kept per
 * communicator, one per count and type: their device scratch must outlive
 * the calls queued on the streams. Every rank makes the same ones, from
 * the same calls, without an agreement of their own. */
#include "door.h"

#include "api/compressor.h"

#include <stdlib.h>

/* A communicator keeps at most this many; a program of ever new sizes
 * gets plain all-reduces beyond them. */
#define SHOAL_NCCL_MAX_COMPS 64

struct shoal_nccl_comp {
    struct shoal_nccl_comp *next;
    size_t count;
    shoal_dtype_t dtype;
    shoal_compressor_t comp;
};

/* Under comm->lock: the compressor for count and dtype, made when missing
 * and there is room; NULL otherwise (*st_p says why when it failed). */
static shoal_compressor_t comp_for(struct ncclComm *comm, shoal_comm_t sc, size_t count,
                                   shoal_dtype_t dtype, shoal_status_t *st_p)
{
    for (struct shoal_nccl_comp *e = comm->comps; e; e = e->next) {
        if (e->count == count && e->dtype == dtype)
            return e->comp;
    }
    if (comm->ncomps >= SHOAL_NCCL_MAX_COMPS)
        return NULL;
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_INT8);
    o.error_feedback = 0;
    struct shoal_nccl_comp *e = calloc(1, sizeof(*e));
    if (!e) {
        *st_p = SHOAL_ERR_NO_MEMORY;
        return NULL;
    }
    *st_p = shoal_compressor_local(sc, &o, count, dtype, &e->comp);
    if (*st_p != SHOAL_OK) {
        free(e);
        return NULL;
    }
    e->count = count;
    e->dtype = dtype;
    e->next = comm->comps;
    comm->comps = e;
    comm->ncomps++;
    return e->comp;
}

shoal_status_t shoal_nccl_compress_stream(struct ncclComm *comm, shoal_comm_t sc,
                                          const void *sendbuf, void *recvbuf, size_t count,
                                          shoal_dtype_t dtype, shoal_op_t op, void *stream,
                                          int *taken)
{
    shoal_status_t st = SHOAL_OK;
    pthread_mutex_lock(&comm->lock);
    shoal_compressor_t comp = comp_for(comm, sc, count, dtype, &st);
    pthread_mutex_unlock(&comm->lock);
    *taken = comp != NULL;
    if (!comp)
        return st;
    return shoal_allreduce_compressed_stream(comp, sendbuf, recvbuf, op, NULL, stream);
}

void shoal_nccl_compress_free(struct ncclComm *comm)
{
    while (comm->comps) {
        struct shoal_nccl_comp *e = comm->comps;
        comm->comps = e->next;
        shoal_compressor_destroy(e->comp);
        free(e);
    }
    comm->ncomps = 0;
}
