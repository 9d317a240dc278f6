/* The simulator's kernels: a simulated rank's buffers stand for memory
 * that is never touched (they are mapped without access), so every pass a
 * schedule makes over memory only adds its bytes to the rank's count,
 * which the simulator charges to the rank's clock (shoal_sim_charge). */
#include "sim_priv.h"

static void dry_count(struct shoal_team *team, size_t bytes)
{
    *(size_t *)team->kern_ctx += bytes;
}

static void dry_move(struct shoal_team *team, void *dst, const void *src, size_t bytes)
{
    dry_count(team, bytes);
}

static void dry_zero(struct shoal_team *team, void *dst, size_t bytes)
{
    dry_count(team, bytes);
}

static void dry_combine(struct shoal_team *team, shoal_reduce_fn_t fn, void *dst,
                        const void *a, const void *b, size_t count, size_t esize)
{
    dry_count(team, count * esize);
}

static void dry_finish_avg(struct shoal_team *team, void *dst, size_t count,
                           shoal_dtype_t dtype, int n)
{
    dry_count(team, count * shoal_dtype_bytes(dtype));
}

static void dry_encode(struct shoal_team *team, const shoal_codec_t *c, void *wire,
                       const float *src, const float *addend, float *residual, size_t n,
                       size_t first)
{
    /* The input, and the residual added to it in the same pass. */
    dry_count(team, (addend ? 2 : 1) * n * sizeof(float));
}

static void dry_add_encode(struct shoal_team *team, const shoal_codec_t *c, void *out,
                           const void *in, const float *src, const float *addend,
                           float *residual, size_t n, size_t first)
{
    dry_count(team, (addend ? 2 : 1) * n * sizeof(float));
}

static void dry_decode(struct shoal_team *team, const shoal_codec_t *c, float *dst,
                       const void *wire, size_t n, size_t first)
{
    dry_count(team, n * sizeof(float));
}

const shoal_kernels_t shoal_sim_dry_kernels = {
    .size = sizeof(shoal_kernels_t),
    .name = "dry",
    .move = dry_move,
    .move_out = dry_move,
    .combine = dry_combine,
    .finish_avg = dry_finish_avg,
    .zero = dry_zero,
    .encode = dry_encode,
    .add_encode = dry_add_encode,
    .decode = dry_decode,
};
