/* Kernels: every pass a schedule makes over local memory (payload copies,
 * reductions, the AVG finish, zeroing, and the codecs' encode and decode)
 * goes through one table bound to the team (team->kern, team.h). The
 * product binds the host kernels (kernels.c); the simulator (src/sim/)
 * binds kernels that touch no data and only count the bytes of each pass,
 * and a device build will bind kernels that launch on the GPU. The
 * schedules and stages are the same under all of them. */
#ifndef SHOAL_KERNELS_H
#define SHOAL_KERNELS_H

#include "base/copy.h"
#include "base/dtype.h"
#include "compress/codec.h"
#include "reduce.h"

#include <stddef.h>

struct shoal_team;

typedef struct shoal_kernels {
    size_t size; /* sizeof(shoal_kernels_t) */
    const char *name;
    /* dst = src, bytes of payload (bytes may be 0). */
    void (*move)(struct shoal_team *team, void *dst, const void *src, size_t bytes);
    /* The same into the operation's output, which nothing reads again
     * before it returns: streamed past the caches when team->stream_out. */
    void (*move_out)(struct shoal_team *team, void *dst, const void *src, size_t bytes);
    /* dst = a op b over count elements of esize bytes, through fn. */
    void (*combine)(struct shoal_team *team, shoal_reduce_fn_t fn, void *dst, const void *a,
                    const void *b, size_t count, size_t esize);
    /* dst /= n over count elements of dtype (the AVG finish). */
    void (*finish_avg)(struct shoal_team *team, void *dst, size_t count, shoal_dtype_t dtype,
                       int n);
    /* bytes of zeros at dst. */
    void (*zero)(struct shoal_team *team, void *dst, size_t bytes);
    /* The codec's operations (codec.h), n values from tensor index first. */
    /* addend: the last step's residual, added in the same pass (codec.h;
     * NULL: none). */
    void (*encode)(struct shoal_team *team, const shoal_codec_t *c, void *wire,
                   const float *src, const float *addend, float *residual, size_t n,
                   size_t first);
    void (*add_encode)(struct shoal_team *team, const shoal_codec_t *c, void *out,
                       const void *in, const float *src, const float *addend, float *residual,
                       size_t n, size_t first);
    void (*decode)(struct shoal_team *team, const shoal_codec_t *c, float *dst,
                   const void *wire, size_t n, size_t first);
} shoal_kernels_t;

/* The kernels of host memory: the team's copy (base/copy.h), streaming
 * stores, the reduction and codec kernels. */
extern const shoal_kernels_t shoal_host_kernels;

#endif
