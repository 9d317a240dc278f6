/* Monotonic time and deadlines. Every blocking wait in shoal takes a
 * deadline from shoal_deadline_after(). Deadlines (seconds long) and the
 * flight recorder's times run on the coarse clock, a read of a value the
 * kernel keeps (a few ns; it advances every tick, 1-4 ms), rather than the
 * precise one: every operation reads it, small ones included. */
#ifndef SHOAL_CLOCK_H
#define SHOAL_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t shoal_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The coarse clock; compare its values only with each other. */
static inline uint64_t shoal_coarse_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t shoal_deadline_after(uint64_t ns)
{
    return shoal_coarse_now_ns() + ns;
}

static inline int shoal_deadline_passed(uint64_t deadline_ns)
{
    return shoal_coarse_now_ns() >= deadline_ns;
}

/* Milliseconds left before deadline, for poll(): 0 when passed, capped. */
static inline int shoal_deadline_ms_left(uint64_t deadline_ns)
{
    uint64_t now = shoal_coarse_now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > 1000000 ? 1000000 : (int)ms;
}

static inline int shoal_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The median of n timings (n > 0); sorts t. */
static inline uint64_t shoal_median_ns(uint64_t *t, size_t n)
{
    qsort(t, n, sizeof(t[0]), shoal_u64_cmp);
    return t[n / 2];
}

#endif
