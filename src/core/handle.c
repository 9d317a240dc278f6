/* Handle pools (see handle.h).
 *
 * A shell is a power of two of bytes: a cache line for the free-list link,
 * then the object. The link sits outside the object so that putting an
 * object on the free list writes nothing that a stale handle's reader may
 * look at. Shells are a power of two so that shoal_handle_owns finds an
 * object's start with a mask rather than a division: it runs on every API
 * call. */
#include "handle.h"

#include "base/log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SHELL_HEAD 64 /* bytes before the object: the link, on its own line */

static char *shell_of(void *obj)
{
    return (char *)obj - SHELL_HEAD;
}

static void **shell_link(char *shell)
{
    return (void **)shell;
}

/* Lock held: a new slab, its shells pushed on the free list. */
static int pool_grow(shoal_handle_pool_t *pool)
{
    unsigned k = atomic_load_explicit(&pool->nslabs, memory_order_relaxed);
    if (k == SHOAL_HANDLE_SLABS) {
        shoal_error(MEM, "no room for more %s handles (%u slabs in use)", pool->what, k);
        return -1;
    }
    if (k == 0) {
        unsigned shift = 6;
        while (((size_t)1 << shift) < SHELL_HEAD + pool->size)
            shift++;
        pool->shift = shift;
    }
    size_t n = (size_t)SHOAL_HANDLE_FIRST << k;
    size_t bytes = n << pool->shift;
    void *mem;
    if (posix_memalign(&mem, SHELL_HEAD, bytes) != 0) {
        shoal_error(MEM, "no memory for %zu %s handles (%zu B)", n, pool->what, bytes);
        return -1;
    }
    memset(mem, 0, bytes);
    char *slab = mem;
    /* Pushed last first, so that the pool hands out low addresses first. */
    for (size_t i = n; i-- > 0;) {
        char *shell = slab + (i << pool->shift);
        *shell_link(shell) = pool->free_list;
        pool->free_list = shell + SHELL_HEAD;
    }
    /* The slab is published before the count that makes owns look at it;
     * shift was set before the first. */
    atomic_store_explicit(&pool->slabs[k], slab, memory_order_relaxed);
    atomic_store_explicit(&pool->nslabs, k + 1, memory_order_release);
    return 0;
}

void *shoal_handle_alloc(shoal_handle_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    void *obj = pool->free_list;
    if (!obj && pool_grow(pool) == 0)
        obj = pool->free_list;
    if (obj)
        pool->free_list = *shell_link(shell_of(obj));
    pthread_mutex_unlock(&pool->lock);
    return obj;
}

void shoal_handle_free(shoal_handle_pool_t *pool, void *obj)
{
    if (!obj)
        return;
    pthread_mutex_lock(&pool->lock);
    *shell_link(shell_of(obj)) = pool->free_list;
    pool->free_list = obj;
    pthread_mutex_unlock(&pool->lock);
}

int shoal_handle_owns(const shoal_handle_pool_t *pool, const void *p)
{
    unsigned n = atomic_load_explicit(&((shoal_handle_pool_t *)pool)->nslabs,
                                      memory_order_acquire);
    /* Unsigned arithmetic: an address below a slab wraps to a large offset. */
    uintptr_t shell = (uintptr_t)p - SHELL_HEAD;
    for (unsigned k = 0; k < n; k++) {
        uintptr_t base = (uintptr_t)atomic_load_explicit(
            &((shoal_handle_pool_t *)pool)->slabs[k], memory_order_relaxed);
        uintptr_t off = shell - base;
        if (off < (((uintptr_t)SHOAL_HANDLE_FIRST << k) << pool->shift))
            return (off & (((uintptr_t)1 << pool->shift) - 1)) == 0;
    }
    return 0;
}
