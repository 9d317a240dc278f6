/* The compressed all-reduce's entry: a call record like shoal_allreduce's
 * with the codec attached, issued like every other call. */
#include "compress_call.h"

#include "exec.h"

shoal_status_t shoal_allreduce_codec(shoal_comm_t comm, const void *sendbuf, void *recvbuf,
                                     size_t count, shoal_dtype_t dtype, shoal_op_t op,
                                     const shoal_codec_t *codec, float *residual,
                                     shoal_compress_algo_t algo)
{
    return shoal_allreduce_codec_ef(comm, sendbuf, recvbuf, count, dtype, op, codec, NULL,
                                    residual, algo);
}

shoal_status_t shoal_allreduce_codec_ef(shoal_comm_t comm, const void *sendbuf, void *recvbuf,
                                        size_t count, shoal_dtype_t dtype, shoal_op_t op,
                                        const shoal_codec_t *codec, const float *residual_in,
                                        float *residual, shoal_compress_algo_t algo)
{
    /* A NULL codec must not turn the call into a plain all-reduce: it
     * stands in as a codec without ops, which the checks refuse. */
    static const shoal_codec_t none = {.ops = NULL};
    shoal_call_t c = {
        .what = "shoal_allreduce_codec",
        .args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                 .count = count, .dtype = dtype, .op = op, .codec = codec ? codec : &none,
                 .residual = residual, .residual_in = residual_in,
                 .codec_algo = (int)algo},
    };
    return shoal_call_issue(comm, &c, 0, NULL);
}
