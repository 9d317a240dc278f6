/* The compressed all-reduce as a collective (the executor-side call under
 * the public compressor API): a call like shoal_allreduce whose fp32
 * values travel in a codec's wire form through one of the codec schedules
 * (algos/ring_allreduce.c, twoshot.c, tree.c and hier.c with the codec
 * stage). */
#ifndef SHOAL_COMPRESS_CALL_H
#define SHOAL_COMPRESS_CALL_H

#include "compress/codec.h"
#include "shoal.h"

/*
 * All-reduce of count fp32 values (dtype must be SHOAL_FLOAT32, op
 * SHOAL_SUM or SHOAL_AVG) through codec, on the same path as every
 * blocking collective: argument checks, the operation's signature (its own
 * kind, so that a plain all-reduce on another rank is SHOAL_ERR_MISMATCH;
 * and an id of the codec's name, block, rounding, width and algo, so that
 * ranks whose codecs differ in those get SHOAL_ERR_MISMATCH, not a mixed
 * result), flight recorder, deadline, sticky errors. In place when
 * sendbuf == recvbuf. Every rank gets bitwise the same result, which is
 * within the codec's error of the exact sum.
 *
 * algo: the schedule (shoal_codec_algo_select in algos/algo.h says which
 * one AUTO picks). The ring quantises each value once per rank, the
 * two-shot each rank's contribution once and the sum once, the tree
 * (int8 only) a partial sum once per level of a binary tree (at most
 * ceil(log2(n + 1)) times), the hierarchical one (AUTO across hosts) each
 * host's sum once.
 *
 * residual: NULL, or count floats (not overlapping the buffers) that
 * receive this rank's error feedback; summed over the ranks they are the
 * exact sum minus the result (for AVG, minus nranks times it), up to fp32
 * rounding. A single rank returns its input exactly and zero residuals.
 *
 * codec is read while the call runs and must be the same on every rank
 * (stochastic rounding: the same seed and step give the same stream).
 * SHOAL_ERR_INVALID_ARG, comm still usable, for another dtype or op, a
 * NULL or invalid codec (ops->wire_bytes(codec, block) == 0), a pipeline
 * piece (SHOAL_CHUNK_SIZE) too small for one codec block, an unknown algo,
 * or SHOAL_COMPRESS_ALGO_TWO_SHOT or SHOAL_COMPRESS_ALGO_TREE with the
 * ternary codec.
 */
shoal_status_t shoal_allreduce_codec(shoal_comm_t comm, const void *sendbuf, void *recvbuf,
                                     size_t count, shoal_dtype_t dtype, shoal_op_t op,
                                     const shoal_codec_t *codec, float *residual,
                                     shoal_compress_algo_t algo);

/* The same with error feedback fused: residual_in (NULL, or count floats
 * not overlapping the buffers; it may be residual itself) is the last
 * call's residual, added to this rank's input piece by piece in the pass
 * that encodes it, so that the call reduces sendbuf + residual_in with no
 * pass over the tensor before the wire. Results, residuals included, are
 * bitwise those of shoal_allreduce_codec on the fp32 sums
 * sendbuf[i] + residual_in[i]. */
shoal_status_t shoal_allreduce_codec_ef(shoal_comm_t comm, const void *sendbuf, void *recvbuf,
                                        size_t count, shoal_dtype_t dtype, shoal_op_t op,
                                        const shoal_codec_t *codec, const float *residual_in,
                                        float *residual, shoal_compress_algo_t algo);

#endif
