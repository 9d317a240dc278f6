/* Memory registration (shoal_comm_register): a per-communicator list of
 * (buf, size) records. A handle is the record's address, and a record is
 * only ever reached through the list, so a stale or foreign handle is
 * recognised by not being found, never dereferenced. Registrations are few
 * and made outside the hot path: a list searched in order serves. */
#include "reg.h"

#include "comm.h"
#include "base/log.h"

#include <stdint.h>
#include <stdlib.h>

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
    shoal_reg_t *reg = malloc(sizeof(*reg));
    if (!reg) {
        s = shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: out of memory", what);
        goto out_leave;
    }
    reg->buf = buf;
    reg->size = size;
    reg->next = comm->regs;
    comm->regs = reg;
    shoal_debug(MEM, "rank %d: registered %zu B at %p as %p", comm->rank, size, buf,
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
    while (*pp && (void *)*pp != handle)
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
    shoal_debug(MEM, "rank %d: deregistered %zu B at %p", comm->rank, reg->size, reg->buf);
    free(reg);
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
        if (p >= b && len <= reg->size && p - b <= reg->size - len)
            return reg;
    }
    return NULL;
}

void shoal_reg_release_all(struct shoal_comm *comm)
{
    size_t n = 0;
    while (comm->regs) {
        shoal_reg_t *reg = comm->regs;
        comm->regs = reg->next;
        free(reg);
        n++;
    }
    if (n)
        shoal_debug(MEM, "rank %d: %zu registrations left at the end of the communicator were "
                    "freed", comm->rank, n);
}
