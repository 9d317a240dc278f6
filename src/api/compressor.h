/* Compressors (shoal.h's shoal_compressor_*): the state of one logical
 * tensor's compressed all-reduces, and the call that runs one.
 *
 * A compressed all-reduce is one call record (exec.h: call->comp set) that
 * goes through the communicator's queue like any collective; when it runs,
 * shoal_compressor_run carries it out as inner calls on the same
 * communicator, every rank making the same ones:
 * - INT8: one codec all-reduce (compress_call.h's kind of call);
 * - TERNARY: a max all-reduce of the block scales (bf16, rounded up),
 *   then the codec one;
 * - POWERSGD: two sum all-reduces, of every P (with the vectors) and of
 *   every Q (compress/powersgd.h); during warm-up one plain all-reduce.
 * The inner full-precision all-reduces carry the signature kind
 * SHOAL_SIG_COMPRESSOR, so a plain collective on another rank meets a
 * mismatch rather than mixing with them.
 *
 * Error feedback: the input of a call is this rank's buffer plus its
 * residual; the call writes the new residual aside and it replaces the old
 * one only when every inner call succeeded. */
#ifndef SHOAL_COMPRESSOR_H
#define SHOAL_COMPRESSOR_H

#include "core/exec.h"

/* Run call (call->comp set) on comm: the executor's side. */
shoal_status_t shoal_compressor_run(struct shoal_comm *comm, const shoal_call_t *call);

/* A compressor made by this rank alone, without the agreement of
 * shoal_compressor_create: for callers whose every rank makes the same one
 * (a door's stateless compression). SHOAL_ERR_INVALID_ARG for options
 * that create would refuse, SHOAL_ERR_NO_MEMORY. */
shoal_status_t shoal_compressor_local(struct shoal_comm *comm,
                                      const shoal_compress_options_t *options, size_t count,
                                      shoal_dtype_t dtype, shoal_compressor_t *comp_p);

/* Device memory comp's state holds on its device (0 while on the host):
 * for the NCCL door's ncclCommMemStats. */
size_t shoal_compressor_device_bytes(shoal_compressor_t comp);

/* This rank's error-feedback residual (count floats; NULL without error
 * feedback), as of the last successful call: for tests. */
shoal_status_t shoal_compressor_residual(shoal_compressor_t comp, const float **res_p);

/* ADAPTIVE: the agreed statistics of the last choice (ntensors x (nopt +
 * 1) doubles: each choice's squared error, then the tensor's squared
 * norm, summed over the ranks) and each choice's wire bytes (ntensors x
 * nopt; 0: not offered, but for full precision, choice 0): for tests. */
shoal_status_t shoal_compressor_adapt_table(shoal_compressor_t comp, const double **stats_p,
                                            const uint64_t **bytes_p, size_t *nopt_p);

#endif
