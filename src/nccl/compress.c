/* The door's compressors, kept per communicator:
 * - SHOAL_COMPRESS=int8 on device buffers: the door's float all-reduces
 *   on device memory go through the stream-ordered compressed all-reduce
 *   (shoal_allreduce_compressed_stream), as its host all-reduces go
 *   through shoal_allreduce_int8; their device scratch must outlive the
 *   calls queued on the streams.
 * - SHOAL_COMPRESS_ALLGATHER and SHOAL_COMPRESS_REDUCESCATTER on host
 *   buffers: the door's float all-gathers and reduce-scatters go through
 *   shoal_allgather_compressed and shoal_reduce_scatter_compressed, which
 *   take a compressor made for their collective; set to int8, on device
 *   buffers: through shoal_allgather_compressed_stream and
 *   shoal_reduce_scatter_compressed_stream.
 * All are stateless as shoal_allreduce_int8 is (no error feedback, nearest
 * rounding, the default block), one compressor per collective, kind,
 * count and type. Every rank makes the same ones, from the same calls,
 * without an agreement of their own (shoal_compressor_local). */
#include "door.h"

#include "api/compressor.h"
#include "base/dtype.h"
#include "base/log.h"

#include <stdlib.h>

/* A communicator keeps at most this many; a program of ever new sizes
 * gets plain collectives beyond them. */
#define SHOAL_NCCL_MAX_COMPS 64

struct shoal_nccl_comp {
    struct shoal_nccl_comp *next;
    shoal_compress_coll_t coll;
    shoal_compress_kind_t kind;
    size_t count;
    shoal_dtype_t dtype;
    shoal_compressor_t comp;
};

static const char *kind_name(shoal_compress_kind_t kind)
{
    switch (kind) {
    case SHOAL_COMPRESS_INT8: return "int8";
    case SHOAL_COMPRESS_INT4: return "int4";
    case SHOAL_COMPRESS_SIGN: return "sign";
    default: return "?";
    }
}

/* Under comm->lock: the compressor for (coll, kind, count, dtype), made
 * when missing and there is room; NULL otherwise (*st_p says why when it
 * failed). what names the call in the log. */
static shoal_compressor_t comp_for(struct ncclComm *comm, shoal_comm_t sc, const char *what,
                                   shoal_compress_coll_t coll, shoal_compress_kind_t kind,
                                   size_t count, shoal_dtype_t dtype, shoal_status_t *st_p)
{
    for (struct shoal_nccl_comp *e = comm->comps; e; e = e->next) {
        if (e->coll == coll && e->kind == kind && e->count == count && e->dtype == dtype)
            return e->comp;
    }
    if (comm->ncomps >= SHOAL_NCCL_MAX_COMPS) {
        /* Once per communicator: the calls that follow go plain. */
        if (!comm->comps_full_said) {
            comm->comps_full_said = 1;
            shoal_info(COMP, "%s: this communicator holds %d compressors, the most it "
                       "keeps: calls of other sizes or types go uncompressed", what,
                       SHOAL_NCCL_MAX_COMPS);
        }
        return NULL;
    }
    shoal_compress_options_t o;
    *st_p = shoal_compress_options_init(&o, kind);
    if (*st_p != SHOAL_OK)
        return NULL;
    o.error_feedback = 0;
    o.coll = coll;
    /* The reduce-scatter's two-shot schedule, whose error SHOAL_COMPRESS_
     * REDUCESCATTER states (each contribution quantised once). */
    if (coll == SHOAL_COMPRESS_COLL_REDUCE_SCATTER)
        o.algo = SHOAL_COMPRESS_ALGO_TWO_SHOT;
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
    e->coll = coll;
    e->kind = kind;
    e->count = count;
    e->dtype = dtype;
    e->next = comm->comps;
    comm->comps = e;
    comm->ncomps++;
    shoal_info(COMP, "%s: %s compressor %zu (of at most %d) of this communicator made, for "
               "%zu %s values", what, kind_name(kind), comm->ncomps, SHOAL_NCCL_MAX_COMPS,
               count, shoal_dtype_name(dtype));
    return e->comp;
}

static shoal_compressor_t comp_get(struct ncclComm *comm, shoal_comm_t sc, const char *what,
                                   shoal_compress_coll_t coll, shoal_compress_kind_t kind,
                                   size_t count, shoal_dtype_t dtype, shoal_status_t *st_p)
{
    pthread_mutex_lock(&comm->lock);
    shoal_compressor_t comp = comp_for(comm, sc, what, coll, kind, count, dtype, st_p);
    pthread_mutex_unlock(&comm->lock);
    return comp;
}

shoal_status_t shoal_nccl_compress_stream(struct ncclComm *comm, shoal_comm_t sc,
                                          shoal_compress_coll_t coll, const void *sendbuf,
                                          void *recvbuf, size_t count, shoal_dtype_t dtype,
                                          shoal_op_t op, void *stream, int *taken)
{
    static const char *const names[] = {"ncclAllReduce", "ncclAllGather",
                                        "ncclReduceScatter"};
    const char *what = names[coll];
    shoal_status_t st = SHOAL_OK;
    shoal_compressor_t comp = comp_get(comm, sc, what, coll, SHOAL_COMPRESS_INT8, count, dtype,
                                       &st);
    *taken = comp != NULL;
    if (!comp)
        return st;
    switch (coll) {
    case SHOAL_COMPRESS_COLL_ALLGATHER:
        st = shoal_allgather_compressed_stream(comp, sendbuf, recvbuf, NULL, stream);
        break;
    case SHOAL_COMPRESS_COLL_REDUCE_SCATTER:
        st = shoal_reduce_scatter_compressed_stream(comp, sendbuf, recvbuf, op, NULL, stream);
        break;
    default:
        return shoal_allreduce_compressed_stream(comp, sendbuf, recvbuf, op, NULL, stream);
    }
    /* The line tests look for: the call went compressed. */
    if (st == SHOAL_OK)
        shoal_info(COMP, "%s: %zu %s values a rank, int8 on the device", what, count,
                   shoal_dtype_name(dtype));
    return st;
}

shoal_status_t shoal_nccl_compress_host(struct ncclComm *comm, shoal_comm_t sc,
                                        const char *what, shoal_compress_coll_t coll,
                                        shoal_compress_kind_t kind, const void *sendbuf,
                                        void *recvbuf, size_t count, shoal_dtype_t dtype,
                                        shoal_op_t op, int *taken)
{
    shoal_status_t st = SHOAL_OK;
    shoal_compressor_t comp = comp_get(comm, sc, what, coll, kind, count, dtype, &st);
    *taken = comp != NULL;
    if (!comp)
        return st;
    shoal_compress_info_t info;
    st = coll == SHOAL_COMPRESS_COLL_ALLGATHER
             ? shoal_allgather_compressed(comp, sendbuf, recvbuf, &info)
             : shoal_reduce_scatter_compressed(comp, sendbuf, recvbuf, op, &info);
    /* The line tests look for: the call went compressed, and what it sent. */
    if (st == SHOAL_OK)
        shoal_debug(COMP, "%s compressed (%s): count %zu %s, %d ranks: sent %llu bytes, "
                    "%.2fx fewer than the plain call", what, kind_name(kind), count,
                    shoal_dtype_name(dtype), sc->team.nranks,
                    (unsigned long long)info.bytes_sent, info.ratio);
    return st;
}

size_t shoal_nccl_compress_device_bytes(struct ncclComm *comm)
{
    size_t bytes = 0;
    pthread_mutex_lock(&comm->lock);
    for (struct shoal_nccl_comp *e = comm->comps; e; e = e->next)
        bytes += shoal_compressor_device_bytes(e->comp);
    pthread_mutex_unlock(&comm->lock);
    return bytes;
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
