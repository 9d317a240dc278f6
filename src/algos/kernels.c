/* The host kernels: the passes over memory of a schedule on host buffers. */
#include "kernels.h"

#include "team.h"

#include <string.h>

static void host_move(shoal_team_t *team, void *dst, const void *src, size_t bytes)
{
    shoal_copier_copy(&team->copy_move, dst, src, bytes);
}

/* A plain store reads every line in before it writes it: for an output too
 * large for the caches, that read only costs bandwidth and pushes the
 * inputs out, so such an operation streams (team->stream_out). */
static void host_move_out(shoal_team_t *team, void *dst, const void *src, size_t bytes)
{
    if (team->stream_out)
        shoal_copy_stream(dst, src, bytes);
    else
        shoal_copier_copy(&team->copy_out, dst, src, bytes);
}

static void host_combine(shoal_team_t *team, shoal_reduce_fn_t fn, void *dst,
                         const void *a, const void *b, size_t count, size_t esize)
{
    fn(dst, a, b, count);
}

static void host_finish_avg(shoal_team_t *team, void *dst, size_t count,
                            shoal_dtype_t dtype, int n)
{
    shoal_avg_finish(dst, dst, count, dtype, n);
}

static void host_zero(shoal_team_t *team, void *dst, size_t bytes)
{
    if (bytes)
        memset(dst, 0, bytes);
}

static void host_encode(shoal_team_t *team, const shoal_codec_t *c, void *wire,
                        const float *src, const float *addend, float *residual, size_t n,
                        size_t first)
{
    if (n)
        c->ops->encode(c, wire, src, addend, residual, n, first);
}

static void host_add_encode(shoal_team_t *team, const shoal_codec_t *c, void *out,
                            const void *in, const float *src, const float *addend,
                            float *residual, size_t n, size_t first)
{
    if (n)
        c->ops->add_encode(c, out, in, src, addend, residual, n, first);
}

static void host_decode(shoal_team_t *team, const shoal_codec_t *c, float *dst,
                        const void *wire, size_t n, size_t first)
{
    if (n)
        c->ops->decode(c, dst, wire, n, first);
}

const shoal_kernels_t shoal_host_kernels = {
    .size = sizeof(shoal_kernels_t),
    .name = "host",
    .move = host_move,
    .move_out = host_move_out,
    .combine = host_combine,
    .finish_avg = host_finish_avg,
    .zero = host_zero,
    .encode = host_encode,
    .add_encode = host_add_encode,
    .decode = host_decode,
};
