/* The compressed all-reduce as a collective (internal until the public
 * compressor API exists): a call like shoal_allreduce whose fp32 values
 * travel through the ring in a codec's wire form (algos/ring_codec.c). */
#ifndef SHOAL_COMPRESS_CALL_H
#define SHOAL_COMPRESS_CALL_H

#include "compress/codec.h"
#include "shoal.h"

/*
 * All-reduce of count fp32 values (dtype must be SHOAL_FLOAT32, op
 * SHOAL_SUM or SHOAL_AVG) through codec, on the same path as every
 * blocking collective: argument checks, the operation's signature (its own
 * kind, so that a plain all-reduce on another rank is SHOAL_ERR_MISMATCH),
 * flight recorder, deadline, sticky errors. In place when sendbuf ==
 * recvbuf. Every rank gets bitwise the same result, which is within the
 * codec's error of the exact sum: one quantisation per rank and value.
 *
 * residual: NULL, or count floats (not overlapping the buffers) that
 * receive this rank's error feedback; summed over the ranks they are the
 * exact sum minus the result (for AVG, minus nranks times it), up to fp32
 * rounding. A single rank returns its input exactly and zero residuals.
 *
 * codec is read while the call runs and must be the same on every rank
 * (stochastic rounding: the same seed and step give the same stream).
 * SHOAL_ERR_INVALID_ARG, comm still usable, for another dtype or op, a
 * NULL or invalid codec (ops->wire_bytes(codec, block) == 0), or a
 * pipeline piece (SHOAL_CHUNK_SIZE) too small for one codec block.
 */
shoal_status_t shoal_allreduce_codec(shoal_comm_t comm, const void *sendbuf, void *recvbuf,
                                     size_t count, shoal_dtype_t dtype, shoal_op_t op,
                                     const shoal_codec_t *codec, float *residual);

#endif
