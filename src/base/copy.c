/* The payload copies besides libc's memcpy, and the copier that learns
 * which to take (copy.h):
 * - shoal_copy_vector, plain vector loads and stores;
 * - shoal_copy_stream, for destinations not read again soon: streaming
 *   (non-temporal) stores write whole cache lines to memory without first
 *   reading them in, and leave the cache to data that will be used. */
#include "copy.h"

#include "clock.h"
#include "log.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>

void shoal_copy_vector(void *dst, const void *src, size_t bytes)
{
    char *d = dst;
    const char *s = src;
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_storeu_si128((__m128i *)d, a);
        _mm_storeu_si128((__m128i *)(d + 16), b);
        _mm_storeu_si128((__m128i *)(d + 32), c);
        _mm_storeu_si128((__m128i *)(d + 48), e);
        /* Keeps the compiler from turning the loop back into memcpy. */
        __asm__ volatile("" ::: "memory");
    }
    if (bytes)
        memcpy(d, s, bytes);
}

void shoal_copy_stream(void *dst, const void *src, size_t bytes)
{
    char *d = dst;
    const char *s = src;
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    if (bytes < head + 256) {
        memcpy(d, s, bytes);
        return;
    }
    memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, bytes);
    /* Streaming stores are weakly ordered: done before anything that
     * publishes the data (a release store of a FIFO counter). */
    _mm_sfence();
}
#else
void shoal_copy_vector(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
}

void shoal_copy_stream(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}
#endif

const char *shoal_copy_name(shoal_copy_kind_t kind)
{
    static const char *const names[SHOAL_COPY_NKINDS] = {"auto", "libc", "vector"};
    return (unsigned)kind < SHOAL_COPY_NKINDS ? names[kind] : "?";
}

void shoal_copier_init(shoal_copier_t *c, shoal_copy_kind_t kind, const char *what, int rank)
{
    *c = (shoal_copier_t){.what = what, .rank = rank};
    c->way[0].kind = kind;
    c->way[1].kind = kind;
}

/* The kinds in turn; once both have SHOAL_COPY_LEARN_N copies, or
 * SHOAL_COPY_LEARN_EARLY where one takes more than twice as long per
 * byte, the one with less time per byte (libc's on a tie). */
void shoal_copier_learn(shoal_copier_t *c, shoal_copy_way_t *w, void *dst, const void *src,
                        size_t bytes)
{
    int k = w->n[0] > w->n[1];
    uint64_t t0 = shoal_now_ns();
    shoal_copy(k ? SHOAL_COPY_VECTOR : SHOAL_COPY_LIBC, dst, src, bytes);
    w->ns[k] += shoal_now_ns() - t0;
    w->bytes[k] += bytes;
    if (++w->n[k] != w->n[!k]) /* libc's just ran: the vector's turn */
        return;
    uint32_t n = w->n[k];
    /* ns / bytes compared without division. */
    double libc = (double)w->ns[0] * (double)w->bytes[1];
    double vec = (double)w->ns[1] * (double)w->bytes[0];
    int lopsided = libc > 2 * vec || vec > 2 * libc;
    if (n < SHOAL_COPY_LEARN_N && !(n >= SHOAL_COPY_LEARN_EARLY && lopsided))
        return;
    w->kind = vec < libc ? SHOAL_COPY_VECTOR : SHOAL_COPY_LIBC;
    shoal_info(ALGO, "rank %d: %s, %s: libc %.2f GB/s, vector %.2f GB/s over %u copies each: %s",
               c->rank, c->what ? c->what : "copies",
               w == &c->way[1] ? "1 to 63 B past the source modulo 4 KiB" : "other offsets",
               (double)w->bytes[0] / (double)w->ns[0], (double)w->bytes[1] / (double)w->ns[1],
               n, shoal_copy_name(w->kind));
}
