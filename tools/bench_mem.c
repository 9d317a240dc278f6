/* allreduce_bench --mem (bench_mem.h): the copies and the wait that device
 * memory needs, the rank's device and stream, and the allocator of each
 * kind. This is where the bench first touches CUDA: shoal_dev_get
 * (base/dev.h) loads the device module and the driver. */
#include "bench_mem.h"

#include "bench_coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const shoal_bench_mem_names[SHOAL_BENCH_MEM_COUNT] = {
    [SHOAL_BENCH_MEM_HOST] = "host",
    [SHOAL_BENCH_MEM_SHARED] = "shared",
    [SHOAL_BENCH_MEM_DEVICE] = "device",
};

/* What the header says each kind is. */
const char *const shoal_bench_mem_sources[SHOAL_BENCH_MEM_COUNT] = {
    [SHOAL_BENCH_MEM_HOST] = "malloc",
    [SHOAL_BENCH_MEM_SHARED] = "shoal_mem_alloc",
    [SHOAL_BENCH_MEM_DEVICE] = "the device module's mem_alloc, one stream per rank",
};

/* The buffers shoal_bench_bufs_alloc made last and that are not freed
 * yet (shoal_bench_bufs_of): one set per process, as a process runs one
 * rank. */
static shoal_bench_bufs_t *shoal_bench_bufs_live;

shoal_bench_bufs_t *shoal_bench_bufs_of(const void *buf)
{
    shoal_bench_bufs_t *b = shoal_bench_bufs_live;
    return b && buf && (buf == b->send || buf == b->recv) ? b : NULL;
}

/* --mem device: bytes [off, off + len) of a host mirror onto its device
 * buffer (to_dev) or back (from_dev), waiting for the copy. The copy goes
 * on the rank's stream, so it comes after the calls queued there. Nothing
 * to do for the other kinds, whose mirrors are the buffers. */
static shoal_status_t shoal_bench_dev_copy(shoal_bench_bufs_t *b, int rank, void *dst,
                                           const void *src, size_t len, const char *dir)
{
    if (!b->dev || len == 0)
        return SHOAL_OK;
    shoal_status_t s = b->dev->copy(dst, src, len, b->stream);
    if (s == SHOAL_OK)
        s = b->dev->stream_sync(b->stream);
    if (s != SHOAL_OK)
        fprintf(stderr, "# rank %d: copying %zu bytes %s the device: %s (%s)\n", rank, len, dir,
                shoal_status_string(s), b->dev->why());
    return s;
}

shoal_status_t shoal_bench_to_dev(shoal_bench_bufs_t *b, int rank, int recv, size_t off, size_t len)
{
    unsigned char *dst = recv ? b->recv : b->send;
    const unsigned char *src = recv ? b->hrecv : b->hsend;
    return shoal_bench_dev_copy(b, rank, dst + off, src + off, len, "to");
}

shoal_status_t shoal_bench_from_dev(shoal_bench_bufs_t *b, int rank, int recv, size_t off,
                                    size_t len)
{
    unsigned char *dst = recv ? b->hrecv : b->hsend;
    const unsigned char *src = recv ? b->recv : b->send;
    return shoal_bench_dev_copy(b, rank, dst + off, src + off, len, "from");
}

/* --mem device: wait until the stream has run the work the calls queued,
 * then take a failure of that work from the communicator (a stream-ordered
 * call reports it there, not in its return value). */
shoal_status_t shoal_bench_sync(shoal_comm_t comm, int rank, shoal_bench_bufs_t *b,
                                const char *what)
{
    if (!b->dev)
        return SHOAL_OK;
    shoal_status_t s = b->dev->stream_sync(b->stream);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# rank %d: %s: stream_sync: %s (%s)\n", rank, what,
                shoal_status_string(s), b->dev->why());
        return s;
    }
    shoal_status_t err = SHOAL_OK;
    s = shoal_comm_get_async_error(comm, &err);
    if (s == SHOAL_OK)
        s = err;
    return s == SHOAL_OK ? s : shoal_bench_fail(rank, what, s, comm);
}

/* This rank's index among the ranks on its host, from every rank's host
 * name: what launchers call the local rank, which picks the rank's device.
 * Collective over comm. */
static int shoal_bench_local_rank(shoal_comm_t comm, int rank, int nranks, int *local_p)
{
    char(*hosts)[SHOAL_BENCH_HOST_MAX] = calloc((size_t)nranks, sizeof(*hosts));
    if (!hosts) {
        fprintf(stderr, "# rank %d: out of memory\n", rank);
        return -1;
    }
    if (gethostname(hosts[rank], sizeof(hosts[rank]) - 1) != 0)
        snprintf(hosts[rank], sizeof(hosts[rank]), "?");
    shoal_status_t s = shoal_allreduce(hosts, hosts, (size_t)nranks * sizeof(*hosts),
                                       SHOAL_UINT8, SHOAL_SUM, comm);
    if (s != SHOAL_OK) {
        free(hosts);
        shoal_bench_fail(rank, "shoal_allreduce (host names)", s, comm);
        return -1;
    }
    int local = 0;
    for (int r = 0; r < rank; r++)
        local += !strcmp(hosts[r], hosts[rank]);
    free(hosts);
    *local_p = local;
    return 0;
}

/* --mem device: the device module, this rank's device (local rank modulo
 * the devices this process sees) and its stream. This is the first time
 * the process touches CUDA, and it happens in the rank, never in the -np
 * parent before it forks: a child cannot use a driver that its parent
 * initialised before the fork. */
static int shoal_bench_dev_open(shoal_comm_t comm, int rank, int nranks, shoal_bench_bufs_t *b)
{
    int local;
    if (shoal_bench_local_rank(comm, rank, nranks, &local))
        return -1;
    const shoal_dev_ops_t *dev = shoal_dev_get();
    if (!dev) {
        fprintf(stderr, "# rank %d: --mem device needs CUDA: %s\n", rank, shoal_dev_why());
        return -1;
    }
    int count = dev->device_count();
    if (count < 1) {
        fprintf(stderr, "# rank %d: --mem device: the CUDA driver sees no device\n", rank);
        return -1;
    }
    int device = local % count;
    shoal_status_t s = dev->stream_create(device, &b->stream);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# rank %d: --mem device: a stream on device %d: %s (%s)\n", rank,
                device, shoal_status_string(s), dev->why());
        return -1;
    }
    b->dev = dev;
    b->device = device;
    return 0;
}

/* One buffer that shoal will see, from the allocator of mem (zeroed but on
 * the device, where the caller copies zeros in); NULL, said why, when
 * there is none. */
static unsigned char *shoal_bench_buf_alloc(const shoal_bench_bufs_t *b, size_t len, int rank)
{
    void *p = NULL;
    shoal_status_t s;
    switch (b->mem) {
    case SHOAL_BENCH_MEM_HOST:
        p = calloc(1, len);
        if (!p)
            fprintf(stderr, "# rank %d: cannot allocate %zu bytes\n", rank, len);
        return p;
    case SHOAL_BENCH_MEM_SHARED:
        s = shoal_mem_alloc(len, &p); /* zeroed, like calloc */
        if (s != SHOAL_OK) {
            fprintf(stderr, "# rank %d: shoal_mem_alloc(%zu): %s (%s)\n", rank, len,
                    shoal_status_string(s), shoal_comm_last_error(NULL));
            return NULL;
        }
        return p;
    case SHOAL_BENCH_MEM_DEVICE:
    case SHOAL_BENCH_MEM_COUNT:
        break;
    }
    s = b->dev->mem_alloc(b->device, len, &p);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# rank %d: %zu bytes on device %d: %s (%s)\n", rank, len, b->device,
                shoal_status_string(s), b->dev->why());
        return NULL;
    }
    return p;
}

/* shoal_mem_free and the module's mem_free refuse NULL, so the buffers a
 * failed allocation never made are skipped here. */
static void shoal_bench_buf_free(const shoal_bench_bufs_t *b, unsigned char *p)
{
    if (b->mem == SHOAL_BENCH_MEM_HOST)
        free(p);
    else if (p && b->mem == SHOAL_BENCH_MEM_SHARED)
        shoal_mem_free(p);
    else if (p)
        b->dev->mem_free(p);
}

/* Called when no call can still be using the buffers: before any was
 * made, or after the communicator is destroyed or aborted. A
 * stream-ordered call that failed or was aborted still lets its stream go
 * on, and its work may read or write the buffers until it has, so the
 * stream is waited for before anything is freed. */
void shoal_bench_bufs_free(shoal_bench_bufs_t *b)
{
    if (shoal_bench_bufs_live == b)
        shoal_bench_bufs_live = NULL;
    if (b->stream)
        b->dev->stream_sync(b->stream);
    shoal_bench_buf_free(b, b->send);
    shoal_bench_buf_free(b, b->recv);
    if (b->hsend != b->send)
        free(b->hsend);
    if (b->hrecv != b->recv)
        free(b->hrecv);
    if (b->stream)
        b->dev->stream_destroy(b->stream);
    free(b->expect);
    free(b->tmp);
    memset(b, 0, sizeof(*b));
    b->device = -1;
}

/* Zeroed, so that the slices -m reaches beyond a row's input hold plain
 * numbers rather than whatever the allocator returned. With --mem shared
 * each buffer is one block, so that every slice and every in-place offset
 * of a row lies inside a block its peers can map. With --mem device the
 * host mirrors are allocated too, and their zeros copied onto the device.
 * Collective over comm with --mem device (the local rank). */
int shoal_bench_bufs_alloc(shoal_comm_t comm, shoal_bench_mem_t mem, size_t max_bytes, int check,
                           int rank, int nranks, shoal_bench_bufs_t *b)
{
    size_t len = max_bytes ? max_bytes : 1;
    size_t rlen = len + SHOAL_BENCH_GUARD_BYTES;
    memset(b, 0, sizeof(*b));
    b->mem = mem;
    b->device = -1;
    if (mem == SHOAL_BENCH_MEM_DEVICE && shoal_bench_dev_open(comm, rank, nranks, b))
        goto err_free_bufs;
    b->send = shoal_bench_buf_alloc(b, len, rank);
    if (!b->send)
        goto err_free_bufs;
    b->recv = shoal_bench_buf_alloc(b, rlen, rank);
    if (!b->recv)
        goto err_free_bufs;
    b->hsend = b->send;
    b->hrecv = b->recv;
    if (mem == SHOAL_BENCH_MEM_DEVICE) {
        b->hsend = calloc(1, len);
        b->hrecv = calloc(1, rlen);
        if (!b->hsend || !b->hrecv) {
            fprintf(stderr, "# rank %d: cannot allocate host mirrors of %zu bytes\n", rank,
                    len);
            goto err_free_bufs;
        }
        if (shoal_bench_to_dev(b, rank, 0, 0, len) != SHOAL_OK ||
            shoal_bench_to_dev(b, rank, 1, 0, rlen) != SHOAL_OK)
            goto err_free_bufs;
    }
    if (check) {
        b->expect = malloc(len);
        b->tmp = malloc(len);
        if (!b->expect || !b->tmp) {
            fprintf(stderr, "# rank %d: cannot allocate 2 x %zu bytes to check results\n",
                    rank, len);
            goto err_free_bufs;
        }
    }
    shoal_bench_bufs_live = b;
    return 0;

err_free_bufs:
    shoal_bench_bufs_free(b);
    return -1;
}
