/* The CUDA module's codec entry (dev_ops.h): compress/codec.h's encode,
 * add_encode and decode, the ternary codec's blocks' largest magnitudes
 * (shoal_codec_block_absmax_sum) and their moments (the clipping bound's
 * sums), on device buffers, through one kernel whose element math is the
 * host codecs' own (kern.h). The kernel skips what it does not know,
 * which would leave the outputs silently unwritten, so every argument is
 * checked here, before anything is queued. */
#include "module.h"
#include "kern.h"

#include <stdint.h>
#include <string.h>

static int codec_block_valid(size_t block)
{
    return block == 32 || block == 64 || block == 128;
}

/* The fields and buffers the operation needs, with a message that names
 * the first thing wrong. */
static shoal_status_t codec_check(const shoal_dev_codec_args_t *a)
{
    if (a->op != SHOAL_DEV_CODEC_ENCODE && a->op != SHOAL_DEV_CODEC_ADD_ENCODE &&
        a->op != SHOAL_DEV_CODEC_DECODE && a->op != SHOAL_DEV_CODEC_ABSMAX &&
        a->op != SHOAL_DEV_CODEC_MOMENTS)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: unknown operation %d",
                                (int)a->op);
    if (a->kind != SHOAL_DEV_CODEC_INT8 && a->kind != SHOAL_DEV_CODEC_TERNARY)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: unknown codec kind %d",
                                (int)a->kind);
    if (!codec_block_valid(a->block))
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: block %zu (32, 64 or 128)",
                                a->block);
    if (a->round != SHOAL_ROUND_NEAREST && a->round != SHOAL_ROUND_STOCHASTIC)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: unknown rounding %d", a->round);
    /* The host codec's wire_bytes is 0 for this pair: no wire form. */
    if (a->kind == SHOAL_DEV_CODEC_TERNARY && a->wide && a->packed)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG,
                                "codec: a ternary wire cannot be both wide and packed");
    /* The kernel writes one maximum per block of the run, which must be
     * the tensor's blocks for the maxima to be its scales' inputs. */
    if (a->op == SHOAL_DEV_CODEC_ABSMAX && a->first % a->block != 0)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG,
                                "codec: absmax from value %zu, not a multiple of block %zu",
                                a->first, a->block);
    /* MOMENTS, likewise, gives the tensor's blocks' sums. */
    if (a->op == SHOAL_DEV_CODEC_MOMENTS && a->first % a->block != 0)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG,
                                "codec: moments from value %zu, not a multiple of block %zu",
                                a->first, a->block);
    if (a->count == 0)
        return SHOAL_OK;
    if (a->op == SHOAL_DEV_CODEC_MOMENTS && (!a->src || !a->wire_out))
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: moments with a NULL buffer");
    /* Its outputs are doubles, which the device stores only where they
     * are aligned. */
    if (a->op == SHOAL_DEV_CODEC_MOMENTS)
        return (uintptr_t)a->wire_out % sizeof(double) == 0
                   ? SHOAL_OK
                   : shoal_cuda_failf(SHOAL_ERR_INVALID_ARG,
                                      "codec: moments into %p, not aligned for doubles",
                                      a->wire_out);
    if (a->op == SHOAL_DEV_CODEC_ABSMAX)
        return a->src && a->dst
                   ? SHOAL_OK
                   : shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: absmax with a NULL buffer");
    if (a->kind == SHOAL_DEV_CODEC_TERNARY && !a->scales)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: ternary without its scales");
    if (a->op == SHOAL_DEV_CODEC_DECODE)
        return a->wire_in && a->dst
                   ? SHOAL_OK
                   : shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: decode with a NULL buffer");
    if (!a->wire_out || !a->src || (a->op == SHOAL_DEV_CODEC_ADD_ENCODE && !a->wire_in))
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: %s with a NULL buffer",
                                a->op == SHOAL_DEV_CODEC_ENCODE ? "encode" : "add_encode");
    return SHOAL_OK;
}

shoal_status_t shoal_cuda_codec(const shoal_dev_codec_args_t *args, void *stream)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUcontext ctx;
    shoal_k_codec_t k;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (!args)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "codec: NULL arguments");
    shoal_status_t st = codec_check(args);
    if (st != SHOAL_OK || args->count == 0)
        return st;
    /* Zeroed first: the struct's tail padding travels to the device too.
     * Only the buffers of the operation go in, so the kernel (and the
     * stand-in's reach checks) never see a stale pointer it must ignore. */
    memset(&k, 0, sizeof(k));
    k.op = (int32_t)args->op;
    k.kind = (int32_t)args->kind;
    k.round = (int32_t)args->round;
    k.block = (uint64_t)args->block;
    k.seed = args->seed;
    k.step = args->step;
    k.count = (uint64_t)args->count;
    k.first = (uint64_t)args->first;
    /* ABSMAX and MOMENTS read no scales and no incoming wire, whatever
     * the kind; MOMENTS writes its doubles to wire_out. */
    int sums = args->op == SHOAL_DEV_CODEC_ABSMAX || args->op == SHOAL_DEV_CODEC_MOMENTS;
    if (args->kind == SHOAL_DEV_CODEC_TERNARY && !sums) {
        k.scales = args->scales;
        k.wide = args->wide != 0;
        k.packed = args->packed != 0;
    }
    if (args->op == SHOAL_DEV_CODEC_ABSMAX) {
        k.src = args->src;
        k.addend = args->addend;
        k.dst = args->dst;
    } else if (args->op == SHOAL_DEV_CODEC_MOMENTS) {
        k.src = args->src;
        k.addend = args->addend;
        k.wire_out = args->wire_out;
    } else if (args->op == SHOAL_DEV_CODEC_DECODE) {
        k.wire_in = args->wire_in;
        k.dst = args->dst;
    } else {
        k.wire_out = args->wire_out;
        k.wire_in = args->op == SHOAL_DEV_CODEC_ADD_ENCODE ? args->wire_in : NULL;
        k.src = args->src;
        k.addend = args->addend;
        k.residual = args->residual;
    }
    st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    st = shoal_cuda_launch_codec(cu, ctx, (size_t)shoal_k_codec_units(&k), &k, stream);
    shoal_cuda_leave(&s);
    return st;
}
