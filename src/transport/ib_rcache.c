/* The ib transport's registration cache (ib_priv.h): memory regions of
 * the device keyed by address range. A registration inside a range the
 * cache already holds takes that region (no new pinning); a region lives
 * while some registration holds it and is deregistered with its last one.
 * No region outlives its registrations: the caller's deregistration is the
 * notice that the memory may be freed or remapped, so a region is never
 * offered for memory that may have changed under it (the communicator's
 * registrations, core/reg.c, keep theirs across calls and drop them when
 * the caller deregisters or frees a shoal_mem_alloc block). */
#include "ib_priv.h"

#include "base/log.h"

#include <stdlib.h>
#include <unistd.h>

#if SHOAL_HAVE_IBVERBS
struct shoal_ib_reg {
    struct shoal_ib_reg *next;
    uintptr_t start, end;   /* page-aligned range of the region */
    struct ibv_mr *mr;
    size_t refs;
};

static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

shoal_status_t shoal_ib_mem_reg(shoal_tl_ctx_t *base, void *addr, size_t len,
                                shoal_mem_kind_t kind, shoal_mem_t **mem_p)
{
    shoal_ib_ctx_t *ctx = (shoal_ib_ctx_t *)base;
    if (!mem_p || !addr || len == 0 || kind != SHOAL_MEM_HOST) {
        /* Empty ranges and device memory: nothing this domain reaches. */
        return SHOAL_ERR_UNSUPPORTED;
    }
    size_t pg = page_size();
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
    uintptr_t end = ((uintptr_t)addr + len + pg - 1) & ~(uintptr_t)(pg - 1);
    shoal_ib_mem_t *mem = malloc(sizeof(*mem));
    if (!mem)
        return SHOAL_ERR_NO_MEMORY;
    shoal_ib_reg_t *r = ctx->regs;
    while (r && !(r->start <= start && end <= r->end))
        r = r->next;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (r)
            r->mr = shoal_ib_mr_reg(&ctx->dev, (void *)start, end - start);
        if (!r || !r->mr) {
            free(r);
            free(mem);
            return r ? SHOAL_ERR_SYSTEM : SHOAL_ERR_NO_MEMORY;
        }
        r->start = start;
        r->end = end;
        r->next = ctx->regs;
        ctx->regs = r;
        ctx->reg_misses++;
    }
    r->refs++;
    mem->base = (shoal_mem_t){.addr = addr, .len = len, .kind = SHOAL_MEM_HOST};
    mem->reg = r;
    *mem_p = &mem->base;
    return SHOAL_OK;
}

static void reg_unlink(shoal_ib_ctx_t *ctx, shoal_ib_reg_t *r)
{
    shoal_ib_reg_t **pp = &ctx->regs;
    while (*pp != r)
        pp = &(*pp)->next;
    *pp = r->next;
    shoal_ib_mr_dereg(&ctx->dev, r->mr);
    free(r);
}

shoal_status_t shoal_ib_mem_dereg(shoal_tl_ctx_t *base, shoal_mem_t *mem)
{
    shoal_ib_mem_t *m = (shoal_ib_mem_t *)mem;
    if (!m)
        return SHOAL_OK;
    if (--m->reg->refs == 0)
        reg_unlink((shoal_ib_ctx_t *)base, m->reg);
    free(m);
    return SHOAL_OK;
}

struct ibv_mr *shoal_ib_mem_mr(const shoal_mem_t *mem)
{
    return ((const shoal_ib_mem_t *)mem)->reg->mr;
}

size_t shoal_ib_rcache_regions(const shoal_tl_ctx_t *base)
{
    size_t n = 0;
    for (const shoal_ib_reg_t *r = ((const shoal_ib_ctx_t *)base)->regs; r; r = r->next)
        n++;
    return n;
}

size_t shoal_ib_rcache_misses(const shoal_tl_ctx_t *base)
{
    return ((const shoal_ib_ctx_t *)base)->reg_misses;
}

void shoal_ib_rcache_clear(shoal_ib_ctx_t *ctx)
{
    if (ctx->regs)
        shoal_warn(IBV, "%s: memory regions left registered at close; deregistering them",
                   ctx->dev.port.dev);
    while (ctx->regs)
        reg_unlink(ctx, ctx->regs);
}
#endif
