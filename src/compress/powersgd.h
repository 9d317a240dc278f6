/* PowerSGD (Vogels, Karimireddy and Jaggi, 2019): the local math of one
 * compressed SUM all-reduce of a bucket of fp32 tensors, around the two
 * plain sum all-reduces that the caller runs between the phases.
 *
 * Bucket. ntensors tensors laid out back to back; tensor t holds rows[t] x
 * cols[t] values, row-major (M_t). With r_t = min(rank, rows[t], cols[t]),
 * tensor t is compressed when rows[t] > 1, cols[t] > 1 and
 * (rows[t] + cols[t]) * r_t < rows[t] * cols[t] (its factors are smaller
 * than it is); otherwise it is plain and reduced in full precision.
 *
 * One call, on every rank, with x its bucket (input plus residual):
 *   phase1(x, buf1)          buf1 = [P_t = M_t Q_t for each compressed t |
 *                            the plain tensors' values]
 *   caller: buf1 <- sum over ranks of buf1
 *   phase2(x, buf1, buf2)    orthonormalise each P_t in buf1;
 *                            buf2 = [Q_t = M_t^T P_t for each compressed t]
 *   caller: buf2 <- sum over ranks of buf2
 *   phase3(x, buf1, buf2, out, residual, nranks, scale)
 *                            out_t = P_t Q_t^T (compressed) or the summed
 *                            values (plain), times scale; residuals; the
 *                            summed Q_t become the next call's warm start.
 * P_t is rows[t] x r_t and Q_t is cols[t] x r_t, both row-major, stored one
 * tensor after the other in the order of the bucket. Since sum_r M_r Q =
 * (sum_r M_r) Q, P and Q are those of the summed matrix M = sum_r M_r, and
 * out_t = P_t P_t^T M_t: M_t projected onto the r_t directions of P_t.
 *
 * Warm start. Q_t starts as standard normal values (Box-Muller over two
 * shoal_codec_uniform numbers of the stream shoal_codec_key(seed, t);
 * value i of Q_t uses indices 2i and 2i + 1, computed in double and
 * rounded to float), the same on every rank that passes the same seed.
 * Each phase3 replaces it by the summed Q_t, except that a column of the
 * summed Q_t that is all zero (a zero gradient, or a column of P_t that
 * phase2 found to be in the span of the earlier ones) takes its initial
 * values again: power iteration from a zero column would stay at zero for
 * good. Nothing else changes the state: when the caller never reaches
 * phase3 (an all-reduce failed), the next call starts from the same Q.
 *
 * Orthonormalisation (phase2). Modified Gram-Schmidt over the columns of
 * each P_t, from the first to the last, carried out in double and rounded
 * to float once per value. A column whose part orthogonal to the earlier
 * columns is at most SHOAL_PSGD_NEAR_ZERO of its own length (a zero column
 * included) lies in their span up to rounding: it becomes zero rather than
 * normalised noise or NaN, and contributes nothing to the result.
 *
 * Determinism. Every rank gets bitwise the same out: phase2 is a fixed
 * sequence of scalar operations on buf1, which the all-reduce made the same
 * on every rank, and the product of phase3 reads only buf1 and buf2. All
 * products go through cblas_sgemm (OpenBLAS); shoal_psgd_create sets
 * OpenBLAS to one thread (openblas_set_num_threads(1), once per process,
 * for every user of OpenBLAS in the process), so that no result depends on
 * a thread count. Ranks must run the same OpenBLAS kernels (the same CPU
 * generation), as its kernels for different instruction sets may round
 * differently. Non-finite input gives non-finite results.
 *
 * Threads. An object is not thread-safe; distinct objects may be used by
 * different threads at once. All phases are allocation-free.
 */
#ifndef SHOAL_COMPRESS_POWERSGD_H
#define SHOAL_COMPRESS_POWERSGD_H

#include <stddef.h>
#include <stdint.h>

#include "shoal.h"
#include "compress/psgd_elem.h"

typedef struct shoal_psgd shoal_psgd_t;

/* Where tensor t of a bucket lies (shoal_psgd_tensor): for a caller that
 * runs the products elsewhere (on a device) and leaves the
 * orthonormalisation and the state here. */
typedef struct {
    size_t rows, cols;
    size_t rank;  /* r_t; 0 for a plain tensor */
    size_t off;   /* first value in the bucket (x, out, residual) */
    size_t off1;  /* first float of P_t or of the plain values in buf1 */
    size_t off2;  /* first float of Q_t in buf2 and in the state */
} shoal_psgd_tensor_t;

/* A compressor for a bucket of ntensors tensors of rows[i] x cols[i]
 * values (the arrays are read, not kept) at the given rank, with warm-start
 * values drawn from seed. ntensors may be 0 (an empty bucket; rows and cols
 * may then be NULL). On success *ps_p receives the object, which the
 * caller owns and frees with shoal_psgd_destroy.
 * Returns SHOAL_OK; SHOAL_ERR_INVALID_ARG, *ps_p untouched, for a NULL
 * ps_p, NULL rows or cols with ntensors > 0, rank 0, a tensor with no
 * values (rows or cols 0), a dimension above INT_MAX (a BLAS int), or a
 * bucket whose size in bytes overflows size_t; SHOAL_ERR_NO_MEMORY. */
shoal_status_t shoal_psgd_create(size_t ntensors, const size_t *rows, const size_t *cols,
                                 unsigned rank, uint64_t seed, shoal_psgd_t **ps_p);
/* Frees ps (NULL: nothing). */
void shoal_psgd_destroy(shoal_psgd_t *ps);

/* Values of the bucket: the sum of rows[t] * cols[t]. */
size_t shoal_psgd_count(const shoal_psgd_t *ps);
/* Floats of phase1's buffer: every compressed tensor's P_t (rows x r_t),
 * then every plain tensor's values. Never more than count. */
size_t shoal_psgd_len1(const shoal_psgd_t *ps);
/* Floats of phase2's buffer and of the state: every compressed tensor's
 * Q_t (cols x r_t). Less than count unless both are 0. */
size_t shoal_psgd_len2(const shoal_psgd_t *ps);

/* x: count floats, this rank's bucket (its input plus its residual).
 * buf1: len1 floats, written: [P_t = M_t Q_t | plain values]. */
void shoal_psgd_phase1(shoal_psgd_t *ps, const float *x, float *buf1);

/* phase1 with error feedback fused: the bucket is m + r (m this rank's
 * input, r its last residual, count floats each), which is also written
 * to x (count floats, for phase2 and phase3) in the pass that computes P
 * from it, a panel of rows at a time. With r NULL it is phase1(m) and x is
 * not written. buf1's bits are phase1's of the fp32 sums m + r. x may be m
 * itself, and must not otherwise overlap m, r or buf1. */
void shoal_psgd_phase1_ef(shoal_psgd_t *ps, const float *m, const float *r, float *x,
                          float *buf1);

/* buf1 holds the sum over ranks of phase1's buffers, the same on every
 * rank. Orthonormalises the columns of each P_t in place (see the top of
 * this file) and writes buf2 (len2 floats): [Q_t = M_t^T P_t], with x as
 * given to phase1. */
void shoal_psgd_phase2(shoal_psgd_t *ps, const float *x, float *buf1, float *buf2);

/* buf1 as phase2 left it and buf2 the sum over ranks of phase2's buffers,
 * both the same on every rank. Writes out (count floats): out_t = P_t Q_t^T
 * for compressed tensors (the approximation of the sum over ranks), the
 * summed values of buf1 for plain ones, times scale (1 for SUM, 1/nranks
 * for AVG). When residual is not NULL, writes residual (count floats) =
 * x - (out before scale) / nranks, so that the residuals summed over the
 * ranks are the exact sum minus the unscaled result, up to fp32 rounding;
 * nranks (>= 1) is used for nothing else. Then the state takes the summed
 * Q_t of buf2 (see the top of this file).
 * out and residual may each be x itself (x is read before either is
 * written) but must not overlap each other, buf1 or buf2. */
void shoal_psgd_phase3(shoal_psgd_t *ps, const float *x, const float *buf1, const float *buf2,
                       float *out, float *residual, int nranks, float scale);

/* The bucket's tensors, and tensor t (t < ntensors). */
size_t shoal_psgd_ntensors(const shoal_psgd_t *ps);
const shoal_psgd_tensor_t *shoal_psgd_tensor(const shoal_psgd_t *ps, size_t t);
/* phase3's last step: the state takes the summed Q_t of buf2 (a column
 * all zero takes its initial values again). */
void shoal_psgd_keep_q(shoal_psgd_t *ps, const float *buf2);

/* The warm-start state: len2 floats, every Q_t in the layout of buf2,
 * owned by ps and valid until shoal_psgd_destroy. The caller may read it
 * (to save a checkpoint) and write it (to restore one) between calls. */
float *shoal_psgd_state(shoal_psgd_t *ps);
/* Sets the state back to the initial values drawn from the seed. */
void shoal_psgd_reset(shoal_psgd_t *ps);

#endif
