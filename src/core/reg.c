/* Memory registration (shoal_comm_register), the registration cache
 * (reg.h) and the shareable allocator's public calls (shoal_mem_alloc).
 * A handle is the record's address, and a record is only ever reached
 * through the list, so a stale or foreign handle is recognised by not
 * being found, never dereferenced. Registrations are few and made outside
 * the hot path: a list searched in order serves. */
#include "reg.h"

#include "comm.h"
#include "base/dev.h"
#include "base/log.h"
#include "transport/shmem.h"

#include <stdint.h>
#include <stdlib.h>

_Static_assert(SHOAL_REG_TL >= SHOAL_MAX_TRANSPORTS, "raise SHOAL_REG_TL");

/* Let every open transport's memory domain record the region. One that
 * refuses leaves its slot NULL: the region then simply travels through
 * its slots. */
static void reg_domains(struct shoal_comm *comm, shoal_reg_t *reg)
{
    /* Device memory is recorded as such: no transport reaches it, and
     * operations on it run on staged host memory. */
    shoal_mem_kind_t kind =
        shoal_dev_kind(reg->buf) == SHOAL_DEV_MEM_DEVICE ? SHOAL_MEM_CUDA : SHOAL_MEM_HOST;
    for (int t = 0; t < comm->team.ntl && t < SHOAL_REG_TL; t++) {
        shoal_tl_ctx_t *ctx = comm->team.tl_ctx[t];
        reg->mem[t] = NULL;
        if (ctx && ctx->ops->mem_reg(ctx, reg->buf, reg->size, kind, &reg->mem[t]) != SHOAL_OK)
            reg->mem[t] = NULL;
    }
}

static void reg_drop(struct shoal_comm *comm, shoal_reg_t *reg)
{
    for (int t = 0; t < comm->team.ntl && t < SHOAL_REG_TL; t++) {
        if (reg->mem[t] && comm->team.tl_ctx[t])
            comm->team.tl_ctx[t]->ops->mem_dereg(comm->team.tl_ctx[t], reg->mem[t]);
        reg->mem[t] = NULL;
    }
}

static void reg_free(struct shoal_comm *comm, shoal_reg_t *reg)
{
    reg_drop(comm, reg);
    free(reg);
}

void shoal_reg_drop_domains(struct shoal_comm *comm)
{
    for (shoal_reg_t *reg = comm->regs; reg; reg = reg->next)
        reg_drop(comm, reg);
}

static shoal_reg_t *reg_new(struct shoal_comm *comm, void *buf, size_t size, int user)
{
    shoal_reg_t *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return NULL;
    reg->buf = buf;
    reg->size = size;
    reg->user = user;
    shoal_shmem_block_t blk;
    if (shoal_shmem_find(buf, size, &blk))
        reg->serial = blk.serial;
    reg_domains(comm, reg);
    reg->next = comm->regs;
    comm->regs = reg;
    return reg;
}

shoal_status_t shoal_comm_register(shoal_comm_t comm, void *buf, size_t size, void **handle_p)
{
    static const char what[] = "shoal_comm_register";
    /* Local bookkeeping needs no peer: a broken communicator still takes
     * registrations, so that cleanup code need not care. */
    shoal_status_t s = shoal_comm_enter_any(comm, what);
    if (s != SHOAL_OK)
        return s;
    if (!buf || !handle_p) {
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: %s is NULL", what,
                            buf ? "handle_p" : "buf");
        goto out_leave;
    }
    if (size == 0) {
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: size is 0 (buf %p): nothing "
                            "to register", what, buf);
        goto out_leave;
    }
    if ((uintptr_t)buf > UINTPTR_MAX - size) {
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                            "%s: %zu bytes at %p run past the end of the address space", what,
                            size, buf);
        goto out_leave;
    }
    shoal_reg_t *reg = reg_new(comm, buf, size, 1);
    if (!reg) {
        s = shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: out of memory", what);
        goto out_leave;
    }
    shoal_debug(MEM, "rank %d: registered %zu B at %p as %p", comm->team.rank, size, buf,
                (void *)reg);
    *handle_p = reg;
out_leave:
    shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_comm_deregister(shoal_comm_t comm, void *handle)
{
    static const char what[] = "shoal_comm_deregister";
    shoal_status_t s = shoal_comm_enter_any(comm, what);
    if (s != SHOAL_OK)
        return s;
    shoal_reg_t **pp = &comm->regs;
    while (*pp && ((void *)*pp != handle || !(*pp)->user))
        pp = &(*pp)->next;
    if (!handle || !*pp) {
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                            "%s: handle %p is not a live registration of this communicator "
                            "(NULL, deregistered already, or another communicator's)",
                            what, handle);
        goto out_leave;
    }
    shoal_reg_t *reg = *pp;
    *pp = reg->next;
    shoal_debug(MEM, "rank %d: deregistered %zu B at %p", comm->team.rank, reg->size, reg->buf);
    reg_free(comm, reg);
out_leave:
    shoal_comm_leave(comm);
    return s;
}

const shoal_reg_t *shoal_reg_find(const struct shoal_comm *comm, const void *ptr, size_t len)
{
    uintptr_t p = (uintptr_t)ptr;
    for (const shoal_reg_t *reg = comm->regs; reg; reg = reg->next) {
        uintptr_t b = (uintptr_t)reg->buf;
        /* Registration never wraps (checked), so neither does b + size. */
        if (reg->user && p >= b && len <= reg->size && p - b <= reg->size - len)
            return reg;
    }
    return NULL;
}

const shoal_reg_t *shoal_reg_lookup(struct shoal_comm *comm, const void *ptr, size_t len)
{
    uintptr_t p = (uintptr_t)ptr;
    if (!ptr || len == 0 || p > UINTPTR_MAX - len)
        return NULL;
    const shoal_reg_t *found = NULL;
    for (shoal_reg_t **pp = &comm->regs; *pp;) {
        shoal_reg_t *reg = *pp;
        /* A cached entry of a freed block goes: its pages may be gone, or
         * be another block's by now. */
        if (!reg->user && !shoal_shmem_live(reg->serial)) {
            *pp = reg->next;
            shoal_debug(MEM, "rank %d: %zu B at %p were freed: cache entry dropped",
                        comm->team.rank, reg->size, reg->buf);
            reg_free(comm, reg);
            continue;
        }
        uintptr_t b = (uintptr_t)reg->buf;
        if (!found && p >= b && len <= reg->size && p - b <= reg->size - len)
            found = reg;
        pp = &reg->next;
    }
    if (found)
        return found;
    shoal_shmem_block_t blk;
    if (!shoal_shmem_find(ptr, len, &blk))
        return NULL;
    shoal_reg_t *reg = reg_new(comm, blk.base, blk.len, 0);
    if (reg)
        shoal_debug(MEM, "rank %d: cached shareable block of %zu B at %p", comm->team.rank,
                    blk.len, blk.base);
    return reg;
}

shoal_status_t shoal_mem_alloc(size_t size, void **ptr_p)
{
    return shoal_shmem_alloc(size, ptr_p);
}

shoal_status_t shoal_mem_free(void *ptr)
{
    return shoal_shmem_free(ptr);
}

void shoal_reg_release_all(struct shoal_comm *comm)
{
    size_t n = 0;
    while (comm->regs) {
        shoal_reg_t *reg = comm->regs;
        comm->regs = reg->next;
        n += reg->user;
        reg_free(comm, reg);
    }
    if (n)
        shoal_debug(MEM, "rank %d: %zu registrations left at the end of the communicator were "
                    "freed", comm->team.rank, n);
}
