/* Cross-memory attach between ranks of one host: process_vm_writev and
 * process_vm_readv copy between this process and a peer's private memory
 * in one pass, where the slots copy every byte twice (into the FIFO, out
 * of it). The kernel allows it only where this process could ptrace the
 * peer (same user and kernel.yama.ptrace_scope 0, or CAP_SYS_PTRACE), so
 * it is probed at connect with a real read of the peer's probe buffer,
 * whose first bytes must be the peer's tag. The first probe also times
 * the two ways on this machine: a one-byte read (the call's fixed cost),
 * a read of the whole buffer, and the slots' way of moving it: each
 * slot-sized piece copied into a slot-sized buffer and out of it again,
 * where the slot stays in the cache, so that the second copy costs less
 * than the first. The size where the cross-memory copy starts to beat
 * them is this rank's break-even; where it never does (on machines whose
 * kernel copies across processes slowly), never. The ranks agree at ready (shm.c): cross-memory attach is on
 * only if every local rank's probes passed, from the largest break-even
 * of any of them. */
#include "shm_rmem.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* Bytes of the probe buffer: larger than the per-core caches of common
 * machines, so that the timed copies reach memory as the collectives' do,
 * and small enough to cost a few milliseconds at init. */
#define SHOAL_SHM_CMA_PROBE (4u << 20)
#define SHOAL_SHM_CMA_REPS 4

shoal_status_t shoal_shm_cma_open(shoal_shm_cma_t *c, const shoal_tl_params_t *par)
{
    memset(c, 0, sizeof(*c));
    c->min_bytes = UINT64_MAX;
    if (shoal_config_get()->shm.cma == SHOAL_CMA_OFF) {
        c->failed = 1;
        return SHOAL_OK;
    }
    c->probe = malloc(SHOAL_SHM_CMA_PROBE);
    if (!c->probe) {
        shoal_error(SHM, "cross-memory probe: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    /* Touched now, so that the timed reads fault nothing in. */
    memset(c->probe, 0xa5, SHOAL_SHM_CMA_PROBE);
    memcpy(c->probe, par->tags[par->rank], SHOAL_TL_TAG_BYTES);
    c->min_bytes = 0;
    return SHOAL_OK;
}

void shoal_shm_cma_close(shoal_shm_cma_t *c)
{
    free(c->probe);
    c->probe = NULL;
}

uint64_t shoal_shm_cma_probe_addr(const shoal_shm_cma_t *c)
{
    return (uint64_t)(uintptr_t)c->probe;
}

/* Copy len bytes between local and the peer's raddr, in as many calls as
 * the kernel takes (it may copy less than asked). */
static shoal_status_t cma_rw(int write, int peer, uint32_t pid, uint64_t raddr, void *local,
                             size_t len)
{
    size_t done = 0;
    while (done < len) {
        struct iovec l = {.iov_base = (char *)local + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = write ? process_vm_writev((pid_t)pid, &l, 1, &r, 1, 0)
                          : process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == ESRCH) {
            /* The peer's process is gone: a dead rank, not a local fault. */
            shoal_error(SHM, "rank %d (pid %u) exited or was killed: its memory can no longer "
                        "be reached (%s)", peer, (unsigned)pid,
                        write ? "process_vm_writev" : "process_vm_readv");
            return SHOAL_ERR_PEER;
        }
        if (n <= 0) {
            shoal_error(SHM, "%s of %zu B at %#llx of rank %d (pid %u): %s",
                        write ? "process_vm_writev" : "process_vm_readv", len - done,
                        (unsigned long long)(raddr + done), peer, (unsigned)pid,
                        n < 0 ? strerror(errno) : "nothing copied");
            return SHOAL_ERR_SYSTEM;
        }
        done += (size_t)n;
    }
    return SHOAL_OK;
}

shoal_status_t shoal_shm_cma_write(int peer, uint32_t pid, uint64_t raddr, const void *src,
                                   size_t len)
{
    return cma_rw(1, peer, pid, raddr, (void *)src, len);
}

shoal_status_t shoal_shm_cma_read(int peer, uint32_t pid, uint64_t raddr, void *dst,
                                  size_t len)
{
    return cma_rw(0, peer, pid, raddr, dst, len);
}

/* The best of a few runs of each: the call's fixed cost, a whole-buffer
 * read, and the same bytes copied through a slot-sized buffer (what the
 * slots do). The break-even n solves fixed + n * cma = n * slots: below
 * it, or everywhere when a cross-memory byte costs as much as a byte
 * through the slots, the slots are the faster way. */
static void cma_time(shoal_shm_cma_t *c, const shoal_tl_params_t *par, int peer,
                     uint64_t raddr)
{
    const size_t n = SHOAL_SHM_CMA_PROBE;
    size_t chunk = par->chunk_size && par->chunk_size < n ? par->chunk_size : n;
    unsigned char *buf = malloc(n + chunk);
    if (!buf) {
        c->min_bytes = UINT64_MAX;
        return;
    }
    unsigned char *slot = buf + n;
    memset(buf, 0, n + chunk);
    uint64_t fixed = UINT64_MAX, whole = UINT64_MAX, two = UINT64_MAX;
    uint32_t pid = par->pids[peer];
    for (int k = 0; k < 4 * SHOAL_SHM_CMA_REPS; k++) {
        uint64_t t0 = shoal_now_ns();
        if (cma_rw(0, peer, pid, raddr, buf, 1) != SHOAL_OK)
            goto out_free;
        uint64_t t1 = shoal_now_ns();
        fixed = t1 - t0 < fixed ? t1 - t0 : fixed;
    }
    for (int k = 0; k < SHOAL_SHM_CMA_REPS; k++) {
        uint64_t t1 = shoal_now_ns();
        if (cma_rw(0, peer, pid, raddr, buf, n) != SHOAL_OK)
            goto out_free;
        uint64_t t2 = shoal_now_ns();
        for (size_t o = 0; o < n; o += chunk) {
            size_t piece = n - o < chunk ? n - o : chunk;
            memcpy(slot, (const unsigned char *)c->probe + o, piece);
            memcpy(buf + o, slot, piece);
        }
        uint64_t t3 = shoal_now_ns();
        whole = t2 - t1 < whole ? t2 - t1 : whole;
        two = t3 - t2 < two ? t3 - t2 : two;
    }
    /* Per byte, in ns: whole includes one fixed cost. */
    double cma = (double)(whole > fixed ? whole - fixed : 1) / (double)n;
    double plain = (double)(two ? two : 1) / (double)n;
    if (cma >= plain)
        c->min_bytes = UINT64_MAX;
    else
        c->min_bytes = (uint64_t)((double)fixed / (plain - cma)) + 1;
    shoal_info(SHM, "rank %d: cross-memory read of %zu B from rank %d took %.0f us, through "
               "%zu-B slots %.0f us, a call %.1f us: break-even %s%llu B", par->rank, n, peer,
               (double)whole * 1e-3, chunk, (double)two * 1e-3, (double)fixed * 1e-3,
               c->min_bytes == UINT64_MAX ? "never, " : "",
               (unsigned long long)(c->min_bytes == UINT64_MAX ? 0 : c->min_bytes));
out_free:
    free(buf);
}

void shoal_shm_cma_probe(shoal_shm_cma_t *c, const shoal_tl_params_t *par, int peer,
                         uint64_t raddr)
{
    if (c->failed)
        return;
    const shoal_config_t *cfg = shoal_config_get();
    unsigned char tag[SHOAL_TL_TAG_BYTES];
    int ok = raddr != 0 && cfg->shm.test_cma_fail != par->rank;
    if (ok) {
        struct iovec l = {.iov_base = tag, .iov_len = sizeof(tag)};
        struct iovec r = {.iov_base = (void *)(uintptr_t)raddr, .iov_len = sizeof(tag)};
        ssize_t n = process_vm_readv((pid_t)par->pids[peer], &l, 1, &r, 1, 0);
        if (n != (ssize_t)sizeof(tag)) {
            shoal_info(SHM, "rank %d: no cross-memory attach to rank %d (pid %u): %s; the put "
                       "collectives use slots for private buffers", par->rank, peer,
                       (unsigned)par->pids[peer], n < 0 ? strerror(errno) : "short read");
            ok = 0;
        } else if (memcmp(tag, par->tags[peer], sizeof(tag)) != 0) {
            shoal_warn(SHM, "rank %d: the cross-memory probe of rank %d read another "
                       "process's memory", par->rank, peer);
            ok = 0;
        }
    }
    if (!ok) {
        c->failed = 1;
        c->min_bytes = UINT64_MAX;
        return;
    }
    if (cfg->shm.cma == SHOAL_CMA_ON || c->timed)
        return;
    c->timed = 1;
    cma_time(c, par, peer, raddr);
}
