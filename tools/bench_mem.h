/* allreduce_bench --mem: the buffers of one rank, from malloc (host),
 * shoal_mem_alloc (shared: peers can map them) or GPU memory (device). For
 * device memory also the rank's device and stream, the host mirrors that
 * the bench fills and checks, the copies between them and the device, and
 * the wait for the stream, which brings back the errors of the calls'
 * queued work. */
#ifndef SHOAL_BENCH_MEM_H
#define SHOAL_BENCH_MEM_H

#include "shoal.h"

#include "base/dev.h"

#include <stddef.h>

/* Bytes after the receive buffer's largest row that no call may change. */
#define SHOAL_BENCH_GUARD_BYTES 64
/* Room for a host name, as the ranks exchange them. */
#define SHOAL_BENCH_HOST_MAX 64

/* Where the buffers handed to shoal come from (--mem). */
typedef enum {
    SHOAL_BENCH_MEM_HOST,   /* malloc: every algorithm copies through staging */
    SHOAL_BENCH_MEM_SHARED, /* shoal_mem_alloc: peers may write into them */
    SHOAL_BENCH_MEM_DEVICE, /* GPU memory, driven through the _stream forms */
    SHOAL_BENCH_MEM_COUNT
} shoal_bench_mem_t;

/* Indexed by kind: --mem's names, and what the header says each kind is. */
extern const char *const shoal_bench_mem_names[SHOAL_BENCH_MEM_COUNT];
extern const char *const shoal_bench_mem_sources[SHOAL_BENCH_MEM_COUNT];

/* Buffers of one rank, sized for the largest row. send and recv, which
 * shoal sees, come from the allocator of mem; expect and tmp, which only
 * the checker reads, from malloc. The host fills and checks hsend and
 * hrecv: send and recv themselves, but with --mem device, which the host
 * cannot read, mirrors from malloc that shoal_bench_to_dev and
 * shoal_bench_from_dev copy to and from the device buffers. */
typedef struct {
    shoal_bench_mem_t mem;
    unsigned char *send;
    unsigned char *recv; /* max_bytes + guard */
    unsigned char *hsend;
    unsigned char *hrecv;
    unsigned char *expect;
    unsigned char *tmp;
    const shoal_dev_ops_t *dev; /* --mem device: the module's table; NULL otherwise */
    void *stream;               /* --mem device: the stream every call of the rank uses */
    int device;                 /* --mem device: the device of the buffers; -1 otherwise */
} shoal_bench_bufs_t;

/* b's buffers for rows of up to max_bytes, from the allocator of mem, with
 * SHOAL_BENCH_GUARD_BYTES after recv; with check also expect and tmp.
 * Collective over comm with --mem device. Returns 0, or -1 after saying
 * why on stderr, with b freed. */
int shoal_bench_bufs_alloc(shoal_comm_t comm, shoal_bench_mem_t mem, size_t max_bytes, int check,
                           int rank, int nranks, shoal_bench_bufs_t *b);

/* Frees what shoal_bench_bufs_alloc made, once no call can still be using
 * the buffers; b is left empty. */
void shoal_bench_bufs_free(shoal_bench_bufs_t *b);

/* The buffers of this process (which runs one rank) that
 * shoal_bench_bufs_alloc made and shoal_bench_bufs_free has not freed,
 * if buf is their send or receive buffer; else NULL. How the compressed
 * rows (bench_compress.c), which are handed the buffers themselves, find
 * their host mirrors and stream. */
shoal_bench_bufs_t *shoal_bench_bufs_of(const void *buf);

/* --mem device: bytes [off, off + len) of the send (recv 0) or receive
 * (recv 1) mirror onto the device buffer, or back; waits for the copy.
 * SHOAL_OK at once for the other kinds. */
shoal_status_t shoal_bench_to_dev(shoal_bench_bufs_t *b, int rank, int recv, size_t off,
                                  size_t len);
shoal_status_t shoal_bench_from_dev(shoal_bench_bufs_t *b, int rank, int recv, size_t off,
                                    size_t len);

/* --mem device: waits for the rank's stream and returns the error of the
 * work the calls queued, if any, said on stderr with what (the call's
 * name). SHOAL_OK at once for the other kinds. */
shoal_status_t shoal_bench_sync(shoal_comm_t comm, int rank, shoal_bench_bufs_t *b,
                                const char *what);

#endif
