/* Zero-copy over shared memory: the remote keys of shareable host memory
 * (shmem.h) and the peer memory an shm endpoint has attached. Private to
 * the shm transport. */
#ifndef SHOAL_SHM_RMEM_H
#define SHOAL_SHM_RMEM_H

#include "transport.h"

/* Peer blocks an endpoint keeps mapped; the least recently used one is
 * unmapped when another is needed. */
#define SHOAL_SHM_RCACHE 8

typedef struct {
    uint64_t serial;   /* the peer's block serial; 0: empty entry */
    void *map;
    size_t map_len;
    uint64_t used;     /* rcache clock at the last attach */
    shoal_rmem_t rmem;
} shoal_shm_rentry_t;

typedef struct {
    shoal_shm_rentry_t e[SHOAL_SHM_RCACHE];
    uint64_t clock;
} shoal_shm_rcache_t;

/* rkey_pack of the shm transport: a key for shareable host memory. */
shoal_status_t shoal_shm_rkey_pack(shoal_tl_ctx_t *ctx, const shoal_mem_t *mem,
                                   const void *addr, size_t len, void *blob, size_t *len_p);

/* Attach peer's key in cache c (see rkey_attach). */
shoal_status_t shoal_shm_rcache_attach(shoal_shm_rcache_t *c, int peer, const void *blob,
                                       size_t len, const shoal_rmem_t **rmem_p);

/* Unmap everything c holds. */
void shoal_shm_rcache_clear(shoal_shm_rcache_t *c);

#endif
