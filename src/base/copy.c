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
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

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

/* Page faults of the calling thread so far. */
static long thread_faults(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return 0;
    return ru.ru_minflt + ru.ru_majflt;
}

static int float_cmp(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n), n > 0 (v is reordered). */
static double median(float *v, uint32_t n)
{
    qsort(v, n, sizeof(*v), float_cmp);
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

/* The kinds in pairs, each copy's time per KiB kept; then the decision
 * copy.h describes. Which kind starts pair p is the parity of p's set bits
 * (libc's in pair 0, then the vector's, the vector's, libc's, ...: the
 * Thue-Morse order), so that no periodic pattern of the copies (a peer
 * reading every other slot while this rank fills the next) always falls
 * on the same kind. */
void shoal_copier_learn(shoal_copier_t *c, shoal_copy_way_t *w, void *dst, const void *src,
                        size_t bytes)
{
    int k = w->n[0] == w->n[1] ? __builtin_popcount(w->n[0]) & 1 : w->n[0] > w->n[1];
    long faults = thread_faults();
    uint64_t t0 = shoal_now_ns();
    shoal_copy(k ? SHOAL_COPY_VECTOR : SHOAL_COPY_LIBC, dst, src, bytes);
    uint64_t ns = shoal_now_ns() - t0;
    if (thread_faults() != faults && w->faulted < SHOAL_COPY_LEARN_N) {
        w->faulted++; /* the same kind again next time */
        return;
    }
    w->ns_per_kib[k][w->n[k]] = (float)((double)ns * 1024.0 / (double)bytes);
    if (++w->n[k] != w->n[!k]) /* the pair's first: the other's turn */
        return;
    uint32_t n = w->n[k];
    float v[2][SHOAL_COPY_LEARN_N];
    memcpy(v, w->ns_per_kib, sizeof(v));
    double libc = median(v[0], n), vec = median(v[1], n);
    int lopsided = libc > SHOAL_COPY_LOPSIDED * vec || vec > SHOAL_COPY_LOPSIDED * libc;
    if (n < SHOAL_COPY_LEARN_N && !(n >= SHOAL_COPY_LEARN_EARLY && lopsided))
        return;
    w->kind = vec * SHOAL_COPY_MARGIN < libc ? SHOAL_COPY_VECTOR : SHOAL_COPY_LIBC;
    /* ns per KiB to GB/s: 1024 / ns. */
    shoal_info(ALGO, "rank %d: %s, %s: libc %.2f GB/s, vector %.2f GB/s (medians of %u copies "
               "each; %u with page faults left out): %s",
               c->rank, c->what ? c->what : "copies",
               w == &c->way[1] ? "1 to 63 B past the source modulo 4 KiB" : "other offsets",
               libc > 0 ? 1024.0 / libc : 0.0, vec > 0 ? 1024.0 / vec : 0.0, n, w->faulted,
               shoal_copy_name(w->kind));
}
