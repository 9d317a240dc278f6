/* Element-wise reduction kernels for every dtype x op, and the AVG finish.
 * Half, bf16 and fp8 reduce through fp32 and round to nearest even. Each
 * kernel has a scalar reference (shoal_reduce_ref) that tests compare with. */
#ifndef SHOAL_REDUCE_H
#define SHOAL_REDUCE_H

#include "shoal.h"

#include <stddef.h>

/* dst[i] = a[i] op b[i] for i < count. dst may equal a or b. */
typedef void (*shoal_reduce_fn_t)(void *dst, const void *a, const void *b, size_t count);

/* Kernel for dtype and op; AVG gives the SUM kernel (finish with
 * shoal_avg_finish). NULL for an unknown dtype or op, and for a bitwise or
 * logical op on a type that is not an integer. */
shoal_reduce_fn_t shoal_reduce_fn(shoal_dtype_t dtype, shoal_op_t op);

/* dst[i] = src[i] / n: integers divide the sum (truncating toward zero);
 * floats multiply by 1/n computed in the element's accumulation type (fp32
 * for half, bf16 and fp8; the type itself for fp32 and fp64). dst may equal src. */
void shoal_avg_finish(void *dst, const void *src, size_t count, shoal_dtype_t dtype, int n);

/* Allow (1, the default) or forbid (0) the kernels that use optional CPU
 * instructions chosen at run time (x86's F16C for half); forbidden, every
 * machine runs the portable kernels, which lets tests compare those too.
 * Affects kernels looked up afterwards. Thread-safe. */
void shoal_reduce_simd_enable(int enable);

/* Plain one-element-at-a-time references. */
void shoal_reduce_ref(void *dst, const void *a, const void *b, size_t count,
                      shoal_dtype_t dtype, shoal_op_t op);
void shoal_avg_finish_ref(void *dst, const void *src, size_t count, shoal_dtype_t dtype, int n);

#endif
