/* Zero-copy over shared memory: the remote keys of shareable host memory
 * (shmem.h) and of private host memory reached by cross-memory attach
 * (shm_cma.c), and the peer memory an shm endpoint has attached. Private
 * to the shm transport. */
#ifndef SHOAL_SHM_RMEM_H
#define SHOAL_SHM_RMEM_H

#include "transport.h"

#include <stddef.h>

/* Peer blocks an endpoint keeps mapped; the least recently used one is
 * unmapped when another is needed. */
#define SHOAL_SHM_RCACHE 8

/* Private peer memory attached by cross-memory attach at once: needs no
 * mapping, so the entries are only kept for the caller to point at. */
#define SHOAL_SHM_RCACHE_CMA 4

typedef struct {
    uint64_t serial;   /* the peer's block serial; 0: empty entry */
    void *map;
    size_t map_len;
    uint64_t used;     /* rcache clock at the last attach */
    /* Cross-memory entries: the peer's pid and the range's address in the
     * peer (rmem.addr is then not an address of this process). */
    uint32_t pid;      /* 0: a mapped entry */
    uint64_t raddr;
    shoal_rmem_t rmem;
} shoal_shm_rentry_t;

typedef struct {
    shoal_shm_rentry_t e[SHOAL_SHM_RCACHE];
    shoal_shm_rentry_t cma[SHOAL_SHM_RCACHE_CMA];
    unsigned cma_next;
    uint64_t clock;
} shoal_shm_rcache_t;

/* The entry an attached rmem of the cache points into. */
static inline const shoal_shm_rentry_t *shoal_shm_rentry_of(const shoal_rmem_t *rmem)
{
    return (const shoal_shm_rentry_t *)(const void *)((const char *)rmem -
                                                      offsetof(shoal_shm_rentry_t, rmem));
}

/* rkey_pack of the shm transport: a key for shareable host memory, or,
 * when cma_min is not UINT64_MAX and len is at least cma_min, a
 * cross-memory key for private host memory (mem NULL or of kind HOST). */
shoal_status_t shoal_shm_rkey_pack(shoal_tl_ctx_t *ctx, uint64_t cma_min, const shoal_mem_t *mem,
                                   const void *addr, size_t len, void *blob, size_t *len_p);

/* Attach peer's key in cache c (see rkey_attach); a cross-memory key must
 * name pid, the peer's process. */
shoal_status_t shoal_shm_rcache_attach(shoal_shm_rcache_t *c, int peer, uint32_t pid,
                                       const void *blob, size_t len,
                                       const shoal_rmem_t **rmem_p);

/* ---- cross-memory attach (shm_cma.c) ---- */

/* One rank's side of the probe: its probe buffer (the peers read its tag
 * there), whether any of its probes failed, and its break-even size. */
typedef struct {
    void *probe;         /* NULL: SHOAL_CMA=off */
    int timed;           /* the break-even was measured (against the first peer) */
    int failed;          /* off, or a probe of some peer failed */
    uint64_t min_bytes;  /* this rank's break-even; UINT64_MAX: never */
} shoal_shm_cma_t;

shoal_status_t shoal_shm_cma_open(shoal_shm_cma_t *c, const shoal_tl_params_t *par);
void shoal_shm_cma_close(shoal_shm_cma_t *c);
/* Where peers find the probe buffer (0: none), sent in the address blob. */
uint64_t shoal_shm_cma_probe_addr(const shoal_shm_cma_t *c);
/* Probe peer's buffer at raddr (its probe address); the first successful
 * probe also measures the break-even. */
void shoal_shm_cma_probe(shoal_shm_cma_t *c, const shoal_tl_params_t *par, int peer,
                         uint64_t raddr);
/* Copy len bytes to or from raddr in peer (process pid). */
shoal_status_t shoal_shm_cma_write(int peer, uint32_t pid, uint64_t raddr, const void *src,
                                   size_t len);
shoal_status_t shoal_shm_cma_read(int peer, uint32_t pid, uint64_t raddr, void *dst,
                                  size_t len);

/* Unmap everything c holds. */
void shoal_shm_rcache_clear(shoal_shm_rcache_t *c);

#endif
