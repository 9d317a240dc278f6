/* Fuzz target: the shared-memory address blob a peer sends in the wireup
 * exchange (shoal_shm_check_addr, after the length check of
 * shoal_shm_connect). What it accepts names a segment laid out as ours,
 * by a terminated name under shoal's prefix: the name that
 * shoal_shm_map_peer hands to shm_open next (not called here, so that no
 * input can open a real segment of this machine).
 *
 * Input: the blob. This rank's settings are fixed: 8 slots of 64 KiB,
 * one peer on the host; the seeds come from shoal_shm_addr_pack with
 * those and other settings. */
#include "../../src/transport/shm.c"

#include "fuzz.h"

static uint32_t fuzz_pids[2] = {4242, 77};
static uint8_t fuzz_tags[2][SHOAL_TL_TAG_BYTES];

static void fuzz_ctx_init(shoal_shm_ctx_t *ctx, size_t nslots, size_t chunk, size_t nfifo)
{
    memset(ctx, 0, sizeof(*ctx));
    for (size_t i = 0; i < sizeof(fuzz_tags); i++)
        fuzz_tags[i / SHOAL_TL_TAG_BYTES][i % SHOAL_TL_TAG_BYTES] = (uint8_t)(i * 13);
    ctx->base.params = (shoal_tl_params_t){.rank = 1, .nranks = 2, .chunk_size = chunk,
                                           .pids = fuzz_pids, .tags = fuzz_tags};
    ctx->base.ops = &shoal_shm_ops;
    ctx->chunk = chunk;
    fuzz_assert(shoal_shm_layout(ctx, nfifo, nslots) == SHOAL_OK);
    shoal_shm_name(&ctx->base.params, 0, ctx->name);
}

static void fuzz_seed_addr(const char *name, size_t nslots, size_t chunk, size_t nfifo)
{
    shoal_shm_ctx_t ctx;
    fuzz_ctx_init(&ctx, nslots, chunk, nfifo);
    uint8_t blob[SHOAL_TL_ADDR_MAX];
    size_t len = sizeof(blob);
    fuzz_assert(shoal_shm_addr_pack(&ctx.base, blob, &len) == SHOAL_OK);
    fuzz_seed(name, blob, len);
}

static void fuzz_seeds(void)
{
    fuzz_seed_addr("ok", 8, 65536, 1);
    fuzz_seed_addr("other-nslots", 4, 65536, 1);
    fuzz_seed_addr("other-chunk", 8, 1 << 20, 1);
    fuzz_seed_addr("other-size", 8, 65536, 3);
    /* A blob whose name fills its field with no terminator, and one cut
     * short. */
    shoal_shm_ctx_t ctx;
    fuzz_ctx_init(&ctx, 8, 65536, 1);
    shoal_shm_addr_t addr;
    size_t len = sizeof(addr);
    fuzz_assert(shoal_shm_addr_pack(&ctx.base, &addr, &len) == SHOAL_OK);
    memset(addr.name + strlen(addr.name), 'f', sizeof(addr.name) - strlen(addr.name));
    fuzz_seed("unterminated", &addr, sizeof(addr));
    fuzz_seed("short", &addr, sizeof(addr) / 2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_setup(fuzz_seeds);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static shoal_shm_ctx_t ctx;
    if (!ctx.base.ops)
        fuzz_ctx_init(&ctx, 8, 65536, 1);
    shoal_shm_addr_t addr;
    if (size != sizeof(addr))
        return 0; /* shoal_shm_connect refuses it before looking inside */
    memcpy(&addr, data, sizeof(addr));
    if (shoal_shm_check_addr(&ctx, 0, &addr) != SHOAL_OK)
        return 0;
    fuzz_assert(memchr(addr.name, '\0', sizeof(addr.name)) != NULL);
    fuzz_assert(!strncmp(addr.name, SHOAL_SHM_NAME_PREFIX, strlen(SHOAL_SHM_NAME_PREFIX)));
    fuzz_assert(addr.size == ctx.seg_len && addr.nslots == ctx.nslots &&
                addr.chunk_size == ctx.chunk);
    return 0;
}
