/* Shareable host memory: see shmem.h. Blocks are few and large (buffers
 * of collectives), so a list under one lock serves; lookups happen at most
 * a few times per collective call. */
#include "shmem.h"

#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct shmem_rec {
    struct shmem_rec *next;
    shoal_shmem_block_t blk;
} shmem_rec_t;

static pthread_mutex_t shmem_lock = PTHREAD_MUTEX_INITIALIZER;
static shmem_rec_t *shmem_list;
static uint64_t shmem_serial;

shoal_status_t shoal_shmem_alloc(size_t size, void **ptr_p)
{
    if (!ptr_p || size == 0) {
        shoal_error(MEM, "shoal_mem_alloc: %s", ptr_p ? "size is 0" : "ptr_p is NULL");
        return SHOAL_ERR_INVALID_ARG;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (size > (size_t)INT64_MAX - page) {
        shoal_error(MEM, "shoal_mem_alloc: size %zu is too large", size);
        return SHOAL_ERR_INVALID_ARG;
    }
    size_t len = (size + page - 1) / page * page;
    shoal_status_t s = SHOAL_ERR_NO_MEMORY;
    shmem_rec_t *rec = calloc(1, sizeof(*rec));
    if (!rec) {
        shoal_error(MEM, "shoal_mem_alloc: out of memory");
        goto err;
    }
    int fd = memfd_create("shoal-mem", MFD_CLOEXEC);
    if (fd < 0) {
        shoal_error(MEM, "shoal_mem_alloc: memfd_create: %s", strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto err_free_rec;
    }
    if (ftruncate(fd, (off_t)len) != 0) {
        shoal_error(MEM, "shoal_mem_alloc: ftruncate(%zu): %s", len, strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto err_close_fd;
    }
    /* Reserve the pages now: a sparse file that cannot grow later would
     * fail with SIGBUS in the middle of a peer's copy instead. */
    int rc = posix_fallocate(fd, 0, (off_t)len);
    if (rc != 0) {
        shoal_error(MEM, "shoal_mem_alloc: cannot reserve %zu bytes: %s", len, strerror(rc));
        goto err_close_fd;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        shoal_error(MEM, "shoal_mem_alloc: fstat: %s", strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto err_close_fd;
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        shoal_error(MEM, "shoal_mem_alloc: mmap of %zu bytes: %s", len, strerror(errno));
        goto err_close_fd;
    }
    rec->blk = (shoal_shmem_block_t){.base = p, .len = len, .fd = fd,
                                     .ino = (uint64_t)st.st_ino};
    pthread_mutex_lock(&shmem_lock);
    rec->blk.serial = ++shmem_serial;
    rec->next = shmem_list;
    shmem_list = rec;
    pthread_mutex_unlock(&shmem_lock);
    shoal_debug(MEM, "shoal_mem_alloc: %zu B at %p (memfd %d)", len, p, fd);
    *ptr_p = p;
    return SHOAL_OK;

err_close_fd:
    close(fd);
err_free_rec:
    free(rec);
err:
    return s;
}

shoal_status_t shoal_shmem_free(void *ptr)
{
    shmem_rec_t *found = NULL;
    pthread_mutex_lock(&shmem_lock);
    for (shmem_rec_t **pp = &shmem_list; ptr && *pp; pp = &(*pp)->next) {
        if ((*pp)->blk.base == ptr) {
            found = *pp;
            *pp = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&shmem_lock);
    if (!found) {
        shoal_error(MEM, "shoal_mem_free: %p was not returned by shoal_mem_alloc (or was "
                    "freed already)", ptr);
        return SHOAL_ERR_INVALID_ARG;
    }
    /* Peers that mapped the block keep their pages until they unmap them;
     * the memory returns to the system with the last mapping. */
    munmap(found->blk.base, found->blk.len);
    close(found->blk.fd);
    free(found);
    return SHOAL_OK;
}

int shoal_shmem_find(const void *addr, size_t len, shoal_shmem_block_t *blk_p)
{
    uintptr_t p = (uintptr_t)addr;
    int found = 0;
    pthread_mutex_lock(&shmem_lock);
    for (const shmem_rec_t *r = shmem_list; r; r = r->next) {
        uintptr_t b = (uintptr_t)r->blk.base;
        if (p >= b && len <= r->blk.len && p - b <= r->blk.len - len) {
            *blk_p = r->blk;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&shmem_lock);
    return found;
}

int shoal_shmem_live(uint64_t serial)
{
    int live = 0;
    pthread_mutex_lock(&shmem_lock);
    for (const shmem_rec_t *r = shmem_list; r && !live; r = r->next)
        live = r->blk.serial == serial;
    pthread_mutex_unlock(&shmem_lock);
    return live;
}
