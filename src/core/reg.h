/* The registration cache of a communicator: ranges of memory with what
 * each open transport's memory domain made of them (transport.h: mem_reg).
 * Two kinds of entries share one list:
 * - registrations (shoal_comm_register, the NCCL door's ncclCommRegister
 *   and windows): made and removed by the caller, whose handle is the
 *   entry's address;
 * - cached entries, which shoal_reg_lookup adds for a buffer inside a
 *   block of shoal_mem_alloc (shareable memory) the first time an
 *   operation uses it, covering the whole block. shoal_mem_free of the
 *   block invalidates them: every lookup checks the block is still live
 *   and drops the entry otherwise, so freed memory is never offered to
 *   peers.
 *
 * The list is not locked: register and deregister must not run
 * concurrently with other calls on the communicator (shoal.h), and
 * lookups run on the communicator's executor. */
#ifndef SHOAL_REG_H
#define SHOAL_REG_H

#include <stddef.h>
#include <stdint.h>

struct shoal_comm;
struct shoal_mem;

/* Transports a registration can hold memory-domain state for; at least
 * SHOAL_MAX_TRANSPORTS (checked in reg.c). */
#define SHOAL_REG_TL 4

typedef struct shoal_reg {
    struct shoal_reg *next;   /* the communicator's list, newest first */
    void *buf;
    size_t size;
    int user;                 /* 1: a caller's registration; 0: cached by lookup */
    uint64_t serial;          /* shareable block it lies in (shmem.h); 0: none */
    struct shoal_mem *mem[SHOAL_REG_TL]; /* per comm->team.tl_ctx[t]; NULL where refused */
} shoal_reg_t;

/* The newest live caller's registration of comm covering [ptr, ptr + len),
 * or NULL if none does; an empty range (len 0) is covered when ptr lies
 * within [buf, buf + size]. The result belongs to comm and lives until it
 * is deregistered or comm is freed. */
const shoal_reg_t *shoal_reg_find(const struct shoal_comm *comm, const void *ptr, size_t len);

/* The entry an operation uses for [ptr, ptr + len) (len > 0): a caller's
 * registration or a cached entry covering it, adding a cached entry when
 * the range lies in a shareable block; NULL when the memory is neither
 * registered nor shareable (or out of memory: the caller then uses
 * slots). Drops entries of freed shareable blocks on the way. The result
 * lives until the next lookup, deregistration or the end of comm. */
const shoal_reg_t *shoal_reg_lookup(struct shoal_comm *comm, const void *ptr, size_t len);

/* Release what the transports' memory domains hold for every entry,
 * keeping the entries: the transports are about to close
 * (shoal_transport_teardown). */
void shoal_reg_drop_domains(struct shoal_comm *comm);

/* Free every registration left on comm (destroy, abort, failed init). */
void shoal_reg_release_all(struct shoal_comm *comm);

#endif
