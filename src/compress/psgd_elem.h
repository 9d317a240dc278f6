/* PowerSGD's orthonormalisation (compress/powersgd.h, phase2) as element
 * math that gcc compiles for the host path (compress/powersgd.c) and nvcc
 * as __host__ __device__ for the CUDA module's kernel (cuda/kern.h), so
 * the device orthonormalises P to the host's bits: a fixed sequence of
 * double operations, each product rounded on its own (shoal_codec_dmul:
 * nvcc would fuse it into the sum it feeds), sqrt and the quotient
 * correctly rounded on both. */
#ifndef SHOAL_COMPRESS_PSGD_ELEM_H
#define SHOAL_COMPRESS_PSGD_ELEM_H

#include "base/dtype.h"
#include "compress/codec.h"

#include <math.h>
#include <stddef.h>

/* Relative length under which phase2 sets a column of P to zero. */
#define SHOAL_PSGD_NEAR_ZERO 0x1p-20

/* Modified Gram-Schmidt over the r columns of p (rows x r, row-major), in
 * double: each column is copied out into col (rows doubles), freed of its
 * components along the finished columns one after the other, and
 * normalised; rounding to float happens once, when it goes back. A column
 * left with at most SHOAL_PSGD_NEAR_ZERO of its length is rounding noise
 * in the span of the earlier ones (or zero) and becomes zero; a NaN length
 * fails that test and propagates. */
static inline SHOAL_HD void shoal_psgd_orthonormalise(float *p, size_t rows, size_t r,
                                                      double *col)
{
    for (size_t j = 0; j < r; j++) {
        double len0 = 0.0, len = 0.0;
        for (size_t i = 0; i < rows; i++) {
            col[i] = p[i * r + j];
            len0 += shoal_codec_dmul(col[i], col[i]);
        }
        for (size_t k = 0; k < j; k++) {
            double d = 0.0;
            for (size_t i = 0; i < rows; i++)
                d += shoal_codec_dmul(col[i], p[i * r + k]);
            for (size_t i = 0; i < rows; i++)
                col[i] -= shoal_codec_dmul(d, p[i * r + k]);
        }
        for (size_t i = 0; i < rows; i++)
            len += shoal_codec_dmul(col[i], col[i]);
        len = sqrt(len);
        if (len <= shoal_codec_dmul(SHOAL_PSGD_NEAR_ZERO, sqrt(len0))) {
            for (size_t i = 0; i < rows; i++)
                p[i * r + j] = 0.0f;
            continue;
        }
        for (size_t i = 0; i < rows; i++)
            p[i * r + j] = (float)(col[i] / len);
    }
}

#endif
