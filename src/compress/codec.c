/* What all codecs share: the switch between their SIMD kernels and their
 * scalar references (codec.h). */
#include "compress/codec.h"

#include <stdatomic.h>

/* Relaxed: the flag orders nothing else. A call that races with a change
 * may run either path, and both give the same bits. */
static atomic_int shoal_codec_simd = 1;

void shoal_codec_simd_enable(int enable)
{
    atomic_store_explicit(&shoal_codec_simd, enable != 0, memory_order_relaxed);
}

int shoal_codec_simd_enabled(void)
{
    return atomic_load_explicit(&shoal_codec_simd, memory_order_relaxed);
}
