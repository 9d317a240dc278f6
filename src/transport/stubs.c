/* Shared ops for transports that lack a capability, and the generic host
 * memory registration that transports without remote keys share. Every ops
 * table points at one of these instead of leaving a NULL slot. */
#include "transport.h"

#include "base/log.h"
#include "shmem.h"

#include <stdlib.h>

shoal_status_t shoal_tl_stub_ready(shoal_tl_ctx_t *ctx)
{
    return SHOAL_OK;
}

shoal_status_t shoal_tl_stub_mem_reg(shoal_tl_ctx_t *ctx, void *addr, size_t len,
                                     shoal_mem_kind_t kind, shoal_mem_t **mem_p)
{
    return SHOAL_ERR_UNSUPPORTED;
}

shoal_status_t shoal_tl_stub_mem_dereg(shoal_tl_ctx_t *ctx, shoal_mem_t *mem)
{
    return SHOAL_ERR_UNSUPPORTED;
}

shoal_status_t shoal_tl_stub_rkey_pack(shoal_tl_ctx_t *ctx, const shoal_mem_t *mem,
                                       const void *addr, size_t len, void *blob,
                                       size_t *len_p)
{
    return SHOAL_ERR_UNSUPPORTED;
}

shoal_status_t shoal_tl_stub_rkey_attach(shoal_ep_t *ep, const void *blob, size_t len,
                                         const shoal_rmem_t **rmem_p)
{
    return SHOAL_ERR_UNSUPPORTED;
}

shoal_status_t shoal_tl_stub_put_signal(shoal_ep_t *ep, const void *src,
                                        const shoal_mem_t *local, const shoal_rmem_t *remote,
                                        size_t remote_off, size_t len, const void *hdr)
{
    return SHOAL_ERR_UNSUPPORTED;
}

shoal_status_t shoal_tl_stub_get(shoal_ep_t *ep, void *dst, const shoal_rmem_t *remote,
                                 size_t remote_off, size_t len)
{
    return SHOAL_ERR_UNSUPPORTED;
}

shoal_status_t shoal_tl_stub_progress(shoal_tl_ctx_t *ctx)
{
    return SHOAL_OK;
}

shoal_status_t shoal_tl_stub_sleep(shoal_tl_ctx_t *ctx, uint64_t waited_ns, uint64_t timeout_ns)
{
    return SHOAL_ERR_UNSUPPORTED;
}

shoal_status_t shoal_tl_stub_flush(shoal_ep_t *ep)
{
    return SHOAL_OK;
}

/* Transports that move bytes by copying (shm, tcp) need no pinning or keys:
 * a registration only records the region, so callers can register on every
 * transport alike and a later transport with real keys changes nothing for
 * them. Host memory from shoal_mem_alloc is recorded as shareable, which
 * shm's remote keys need. */
shoal_status_t shoal_tl_host_mem_reg(shoal_tl_ctx_t *ctx, void *addr, size_t len,
                                     shoal_mem_kind_t kind, shoal_mem_t **mem_p)
{
    if (!mem_p || (!addr && len > 0) || (kind != SHOAL_MEM_HOST && kind != SHOAL_MEM_CUDA)) {
        shoal_error(MEM, "mem_reg: invalid region %p+%zu of kind %d", addr, len, (int)kind);
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_mem_t *mem = malloc(sizeof(*mem));
    if (!mem) {
        shoal_error(MEM, "mem_reg: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    shoal_shmem_block_t blk;
    if (kind == SHOAL_MEM_HOST && len > 0 && shoal_shmem_find(addr, len, &blk))
        kind = SHOAL_MEM_HOST_SHARED;
    mem->addr = addr;
    mem->len = len;
    mem->kind = kind;
    *mem_p = mem;
    return SHOAL_OK;
}

shoal_status_t shoal_tl_host_mem_dereg(shoal_tl_ctx_t *ctx, shoal_mem_t *mem)
{
    free(mem);
    return SHOAL_OK;
}
