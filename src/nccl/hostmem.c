/* Is a pointer host memory? Without CUDA a device pointer is an address
 * that this process cannot touch (unified addressing reserves device ranges
 * in the address space without access rights), and touching it would crash
 * the program instead of failing the call. The door keeps a copy of the
 * process's mappings (/proc/self/maps) with their rights, and reads it again
 * only when an address falls outside every mapping it knows, so the common
 * case is a binary search under a lock. A mapping removed since the last
 * read is not noticed; the call then fails as it would have without the
 * check. */
#include "door.h"

#include "base/dev.h"

#include "base/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uintptr_t start, end; /* [start, end) */
    unsigned char readable, writable;
} region_t;

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static region_t *regions;
static size_t nregions, region_cap;

/* Lock held: read the mappings again. Returns 0, or -1 if they cannot be
 * read (then every pointer is taken for host memory: no check is better
 * than refusing everything). */
static int maps_read(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) {
        shoal_warn(MEM, "cannot read /proc/self/maps: buffers are not checked: %s",
                   strerror(errno));
        return -1;
    }
    size_t n = 0;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        unsigned long long start, end;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &start, &end, perms) != 3)
            continue;
        if (n == region_cap) {
            size_t cap = region_cap ? 2 * region_cap : 256;
            region_t *r = realloc(regions, cap * sizeof(*r));
            if (!r)
                break;
            regions = r;
            region_cap = cap;
        }
        regions[n++] = (region_t){.start = (uintptr_t)start, .end = (uintptr_t)end,
                                  .readable = perms[0] == 'r', .writable = perms[1] == 'w'};
    }
    fclose(f);
    /* The kernel lists them in address order. */
    nregions = n;
    return 0;
}

/* Lock held: index of the region holding addr, or -1. */
static long maps_find(uintptr_t addr)
{
    size_t lo = 0, hi = nregions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < regions[mid].start)
            hi = mid;
        else if (addr >= regions[mid].end)
            lo = mid + 1;
        else
            return (long)mid;
    }
    return -1;
}

/* Lock held: 1 if [p, p+len) lies in consecutive regions with the rights,
 * 0 if a region lacks them, -1 if an address is in no known region. */
static int maps_covers(uintptr_t p, size_t len, int writable)
{
    uintptr_t end = p + len;
    long i = maps_find(p);
    if (i < 0)
        return -1;
    for (;;) {
        const region_t *r = &regions[i];
        if (!r->readable || (writable && !r->writable))
            return 0;
        if (end <= r->end)
            return 1;
        if ((size_t)i + 1 >= nregions || regions[i + 1].start != r->end)
            return -1;
        i++;
    }
}

int shoal_nccl_is_host(const void *ptr, size_t len, int writable)
{
    if (len == 0)
        return 1;
    uintptr_t p = (uintptr_t)ptr;
    if (len > UINTPTR_MAX - p)
        return 0;
    pthread_mutex_lock(&maps_lock);
    int ok = nregions ? maps_covers(p, len, writable) : -1;
    if (ok <= 0) {
        /* New memory since the last read, rights granted since (a heap
         * grows by opening up space it reserved), or not memory at all. */
        ok = maps_read() < 0 ? 1 : maps_covers(p, len, writable);
    }
    pthread_mutex_unlock(&maps_lock);
    return ok > 0;
}

int shoal_nccl_is_memory(const void *ptr, size_t len, int writable)
{
    if (shoal_nccl_is_host(ptr, len, writable))
        return 1;
    return shoal_dev_if_driver() && shoal_dev_kind(ptr) != SHOAL_DEV_MEM_HOST;
}
