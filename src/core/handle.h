/* Handle pools: the memory of the objects whose handles the API hands out
 * and later takes back (communicators, requests, the NCCL door's
 * communicators), kept type-stable so that a handle can be checked without
 * a registry scan under a process-wide lock.
 *
 * An object of a pool is never given back to malloc: once destroyed it
 * waits on the pool's free list for the next object of the same type. So a
 * handle that points at one of the pool's objects, live or not, may always
 * be read (and its atomic handle fields written), and the object itself
 * says whether it is live: each type keeps a magic number that its destroy
 * clears before the object goes back to the pool, and a serial that tells a
 * new object at a reused address from the old one (see comm.c). A pointer
 * that is not the start of one of the pool's objects (NULL, junk, a pointer
 * into the middle of one, an object of another type) is refused by
 * shoal_handle_owns without being read.
 *
 * Because a stale handle may still be read or (for a communicator's count
 * of calls in flight) atomically updated by another thread after its object
 * went back to the pool, a type's init must reset its other fields itself
 * and leave those handle fields alone: shoal_handle_alloc does not zero a
 * reused object (a new slab is zero).
 *
 * Thread-safe. The free list and the growth of the pool take the pool's
 * lock; shoal_handle_owns takes none. */
#ifndef SHOAL_HANDLE_H
#define SHOAL_HANDLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

/* Slab k holds SHOAL_HANDLE_FIRST << k objects: 16 slabs hold over a
 * million objects of a type alive at once. */
#define SHOAL_HANDLE_SLABS 16
#define SHOAL_HANDLE_FIRST 16

typedef struct shoal_handle_pool {
    size_t size;                  /* bytes of one object */
    const char *what;             /* the type, for messages */
    pthread_mutex_t lock;         /* free list and growth */
    void *free_list;              /* through each shell's link */
    unsigned shift;               /* log2 of a shell's bytes; set with the first slab */
    atomic_uint nslabs;           /* slabs published, in order */
    char *_Atomic slabs[SHOAL_HANDLE_SLABS];
} shoal_handle_pool_t;

#define SHOAL_HANDLE_POOL_INIT(type, name)                                    \
    {.size = sizeof(type), .what = (name), .lock = PTHREAD_MUTEX_INITIALIZER}

/* An object of pool's type, or NULL when no memory is left (logged). Its
 * memory is zero if new, else as its last owner left it. Owned by the
 * caller until shoal_handle_free. */
void *shoal_handle_alloc(shoal_handle_pool_t *pool);

/* Put obj (from shoal_handle_alloc on pool) back on the free list; it stays
 * readable. Its type clears its magic before. */
void shoal_handle_free(shoal_handle_pool_t *pool, void *obj);

/* Whether p is the start of an object of pool, live or free. Reads only
 * the pool's slab table, without a lock. */
int shoal_handle_owns(const shoal_handle_pool_t *pool, const void *p);

#endif
