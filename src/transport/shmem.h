/* Shareable host memory (shoal_mem_alloc): whole pages backed by an
 * anonymous memory file (memfd) of their own, so that another process of
 * this host can map the same pages given a key naming the file through
 * /proc/<pid>/fd/<fd>. The file has no name in any file system, so nothing
 * outlives the processes that map it: a rank that dies leaves no trace.
 *
 * The blocks live in one process-wide table; every function here is
 * thread-safe. */
#ifndef SHOAL_SHMEM_H
#define SHOAL_SHMEM_H

#include "shoal.h"

#include <stddef.h>
#include <stdint.h>

/* What the table knows of one block (a copy: the block may be freed once
 * the table's lock is dropped, which the serial then tells). */
typedef struct {
    void *base;
    size_t len;       /* whole pages */
    int fd;
    uint64_t ino;     /* the memory file's inode, which a peer checks */
    uint64_t serial;  /* distinct for every block this process allocated */
} shoal_shmem_block_t;

/* A block of at least size bytes (page-aligned, zeroed) at *ptr_p.
 * SHOAL_ERR_INVALID_ARG for size 0, a NULL ptr_p or a size too large;
 * SHOAL_ERR_NO_MEMORY or SHOAL_ERR_SYSTEM when the system refuses. */
shoal_status_t shoal_shmem_alloc(size_t size, void **ptr_p);

/* Unmap and forget the block that starts at ptr. SHOAL_ERR_INVALID_ARG,
 * changing nothing, for a pointer that is not the start of a live block
 * (NULL, freed already, or never allocated here). */
shoal_status_t shoal_shmem_free(void *ptr);

/* 1 and *blk_p when [addr, addr + len) lies inside one live block; 0
 * otherwise. */
int shoal_shmem_find(const void *addr, size_t len, shoal_shmem_block_t *blk_p);

/* Whether the block of that serial is still allocated. */
int shoal_shmem_live(uint64_t serial);

#endif
