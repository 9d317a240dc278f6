/* Remote keys of shareable host memory and their attachment by peers of
 * the same host. A key names the owner's memory file as /proc/<pid>/fd/<fd>
 * with the file's inode, so that a peer opens the very file (a reused
 * descriptor number shows as another inode and is refused) and maps the
 * whole block once; later calls with buffers of the same block find the
 * mapping in the endpoint's cache by the block's serial, which the owner
 * never reuses.
 *
 * A cross-memory key names the owner's pid and the range's address in it;
 * the owner packs one for private memory only when the ranks agreed that
 * cross-memory attach works between them and pays at that length
 * (shm_cma.c), and the peer checks the pid is the one its endpoint
 * reaches. */
#include "shm_rmem.h"

#include "base/log.h"
#include "shmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHOAL_SHM_RKEY_MAGIC 0x73686f616c726b79ull /* "shoalrky" */

typedef struct {
    uint64_t magic;
    uint32_t pid;
    int32_t fd;
    uint64_t ino;
    uint64_t serial;
    uint64_t block_len;
    uint64_t off;      /* of the keyed range inside the block */
    uint64_t len;
} shoal_shm_rkey_t;

_Static_assert(sizeof(shoal_shm_rkey_t) <= SHOAL_TL_RKEY_MAX, "shm remote key too big");

#define SHOAL_SHM_CMA_KEY_MAGIC 0x73686f616c636d61ull /* "shoalcma" */

typedef struct {
    uint64_t magic;
    uint32_t pid;
    uint32_t pad;
    uint64_t addr;     /* in the owner's address space */
    uint64_t len;
} shoal_shm_cma_key_t;

_Static_assert(sizeof(shoal_shm_cma_key_t) <= SHOAL_TL_RKEY_MAX, "cma remote key too big");

static shoal_status_t shoal_shm_cma_pack(uint64_t cma_min, const void *addr, size_t len,
                                         void *blob, size_t *len_p)
{
    if (cma_min == UINT64_MAX || len < cma_min || len == 0)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_shm_cma_key_t key = {
        .magic = SHOAL_SHM_CMA_KEY_MAGIC,
        .pid = (uint32_t)getpid(),
        .addr = (uint64_t)(uintptr_t)addr,
        .len = len,
    };
    memcpy(blob, &key, sizeof(key));
    *len_p = sizeof(key);
    return SHOAL_OK;
}

shoal_status_t shoal_shm_rkey_pack(shoal_tl_ctx_t *ctx, uint64_t cma_min, const shoal_mem_t *mem,
                                   const void *addr, size_t len, void *blob, size_t *len_p)
{
    (void)ctx;
    if (!blob || !len_p || *len_p < sizeof(shoal_shm_rkey_t) ||
        *len_p < sizeof(shoal_shm_cma_key_t) || (!addr && len))
        return SHOAL_ERR_INVALID_ARG;
    uintptr_t a = (uintptr_t)addr;
    if (mem) {
        uintptr_t m = (uintptr_t)mem->addr;
        if (a < m || len > mem->len || a - m > mem->len - len)
            return SHOAL_ERR_INVALID_ARG;
    }
    if (!mem || mem->kind == SHOAL_MEM_HOST)
        return shoal_shm_cma_pack(cma_min, addr, len, blob, len_p);
    if (mem->kind != SHOAL_MEM_HOST_SHARED)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_shmem_block_t blk;
    if (!shoal_shmem_find(addr, len, &blk))
        return SHOAL_ERR_UNSUPPORTED; /* freed since it was registered */
    shoal_shm_rkey_t key = {
        .magic = SHOAL_SHM_RKEY_MAGIC,
        .pid = (uint32_t)getpid(),
        .fd = blk.fd,
        .ino = blk.ino,
        .serial = blk.serial,
        .block_len = blk.len,
        .off = (uint64_t)(a - (uintptr_t)blk.base),
        .len = len,
    };
    memcpy(blob, &key, sizeof(key));
    *len_p = sizeof(key);
    return SHOAL_OK;
}

static shoal_status_t shoal_shm_map_key(int peer, const shoal_shm_rkey_t *key, void **map_p)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/fd/%d", (unsigned)key->pid, (int)key->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        /* Not an error of the call: the endpoint uses slots instead. */
        shoal_debug(SHM, "cannot open %s of rank %d: %s", path, peer, strerror(errno));
        return SHOAL_ERR_UNSUPPORTED;
    }
    shoal_status_t s = SHOAL_ERR_UNSUPPORTED;
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != key->ino ||
        (uint64_t)st.st_size != key->block_len) {
        shoal_debug(SHM, "%s of rank %d is not the memory its key names", path, peer);
        goto out_close_fd;
    }
    void *map = mmap(NULL, (size_t)key->block_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        shoal_debug(SHM, "mmap of %s of rank %d: %s", path, peer, strerror(errno));
        goto out_close_fd;
    }
    *map_p = map;
    s = SHOAL_OK;
out_close_fd:
    close(fd);
    return s;
}

static shoal_status_t shoal_shm_cma_attach(shoal_shm_rcache_t *c, int peer, uint32_t pid,
                                           const void *blob, const shoal_rmem_t **rmem_p)
{
    shoal_shm_cma_key_t key;
    memcpy(&key, blob, sizeof(key));
    if (key.pid != pid || key.len == 0 || key.addr + key.len < key.addr ||
        key.len > SIZE_MAX) {
        shoal_error(SHM, "rank %d sent a malformed cross-memory key", peer);
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_shm_rentry_t *e = &c->cma[c->cma_next++ % SHOAL_SHM_RCACHE_CMA];
    e->pid = key.pid;
    e->raddr = key.addr;
    e->rmem.addr = (void *)(uintptr_t)key.addr;
    e->rmem.len = (size_t)key.len;
    *rmem_p = &e->rmem;
    return SHOAL_OK;
}

shoal_status_t shoal_shm_rcache_attach(shoal_shm_rcache_t *c, int peer, uint32_t pid,
                                       const void *blob, size_t len,
                                       const shoal_rmem_t **rmem_p)
{
    uint64_t magic;
    if (len >= sizeof(magic)) {
        memcpy(&magic, blob, sizeof(magic));
        if (magic == SHOAL_SHM_CMA_KEY_MAGIC && len == sizeof(shoal_shm_cma_key_t))
            return shoal_shm_cma_attach(c, peer, pid, blob, rmem_p);
    }
    shoal_shm_rkey_t key;
    if (len != sizeof(key))
        return SHOAL_ERR_UNSUPPORTED;
    memcpy(&key, blob, sizeof(key));
    if (key.magic != SHOAL_SHM_RKEY_MAGIC || key.serial == 0 || key.off > key.block_len ||
        key.len > key.block_len - key.off) {
        shoal_error(SHM, "rank %d sent a malformed remote key", peer);
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_shm_rentry_t *e = NULL, *victim = &c->e[0];
    for (int i = 0; i < SHOAL_SHM_RCACHE; i++) {
        if (c->e[i].serial == key.serial && c->e[i].map_len == key.block_len) {
            e = &c->e[i];
            break;
        }
        if (c->e[i].used < victim->used)
            victim = &c->e[i];
    }
    if (!e) {
        void *map;
        shoal_status_t s = shoal_shm_map_key(peer, &key, &map);
        if (s != SHOAL_OK)
            return s;
        if (victim->serial)
            munmap(victim->map, victim->map_len);
        e = victim;
        e->serial = key.serial;
        e->map = map;
        e->map_len = (size_t)key.block_len;
    }
    e->used = ++c->clock;
    e->rmem.addr = (char *)e->map + key.off;
    e->rmem.len = (size_t)key.len;
    *rmem_p = &e->rmem;
    return SHOAL_OK;
}

void shoal_shm_rcache_clear(shoal_shm_rcache_t *c)
{
    for (int i = 0; i < SHOAL_SHM_RCACHE; i++) {
        if (c->e[i].serial)
            munmap(c->e[i].map, c->e[i].map_len);
    }
    memset(c, 0, sizeof(*c));
}
