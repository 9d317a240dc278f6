/* The payload copies (base/copy.h) against memcpy: every length around
 * their loop's step, head and tail, every alignment of source and
 * destination, no byte written outside the destination; and the learning
 * copier: it takes both kinds in turn, decides once it has timed enough of
 * each, apart for the copies whose destination lies 1 to 63 bytes past
 * the source modulo 4 KiB and for the others, never times a copy below its
 * minimum, leaves out the copies that took page faults, and keeps a named
 * kind without timing anything. */
#include "harness.h"

#include "base/copy.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define GUARD 64
#define GUARD_BYTE 0xa5

typedef void (*copy_fn_t)(void *dst, const void *src, size_t bytes);

static void copy_libc(void *dst, const void *src, size_t bytes)
{
    shoal_copy(SHOAL_COPY_LIBC, dst, src, bytes);
}

static void copy_auto(void *dst, const void *src, size_t bytes)
{
    shoal_copy(SHOAL_COPY_AUTO, dst, src, bytes);
}

static void check_copy(copy_fn_t fn)
{
    enum { MAXLEN = (1 << 20) + 77 };
    static const size_t lens[] = {0, 1, 15, 63, 64, 65, 127, 128, 129, 255, 256, 257, 319,
                                  320, 321, 4095, 4096, 4097, 65536 + 13, MAXLEN};
    unsigned char *src = malloc(MAXLEN + 64), *dst = malloc(MAXLEN + 2 * GUARD + 64);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < MAXLEN + 64; i++)
        src[i] = (unsigned char)(i * 131 + 7);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        for (size_t so = 0; so < 64; so += 21) {
            for (size_t d = 0; d < 64; d += 9) {
                size_t len = lens[l];
                memset(dst, GUARD_BYTE, MAXLEN + 2 * GUARD + 64);
                unsigned char *to = dst + GUARD + d;
                fn(to, src + so, len);
                if (len)
                    assert_memory_equal(to, src + so, len);
                for (size_t g = 0; g < GUARD + d; g++)
                    assert_int_equal(dst[g], GUARD_BYTE);
                for (size_t g = 0; g < GUARD; g++)
                    assert_int_equal(to[len + g], GUARD_BYTE);
            }
        }
    }
    free(src);
    free(dst);
}

static void test_copy_stream(void **state)
{
    check_copy(shoal_copy_stream);
}

static void test_copy_vector(void **state)
{
    check_copy(shoal_copy_vector);
}

static void test_copy_kinds(void **state)
{
    check_copy(copy_libc);
    check_copy(copy_auto);
    assert_string_equal(shoal_copy_name(SHOAL_COPY_AUTO), "auto");
    assert_string_equal(shoal_copy_name(SHOAL_COPY_LIBC), "libc");
    assert_string_equal(shoal_copy_name(SHOAL_COPY_VECTOR), "vector");
    assert_string_equal(shoal_copy_name(SHOAL_COPY_NKINDS), "?");
}

/* bytes of memory starting on a 4 KiB page (aligned_alloc would want a
 * multiple of the page). */
static unsigned char *page_alloc(size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 4096, bytes) == 0 ? p : NULL;
}

/* Copies of len bytes from a changing source through c, each checked. */
static void copier_run(shoal_copier_t *c, unsigned char *dst, unsigned char *src, size_t len,
                       unsigned copies)
{
    for (unsigned k = 0; k < copies; k++) {
        for (size_t i = 0; i < len; i++)
            src[i] = (unsigned char)(i * 7 + k * 13 + 1);
        memset(dst, 0, len + GUARD);
        shoal_copier_copy(c, dst, src, len);
        assert_memory_equal(dst, src, len);
        for (size_t g = 0; g < GUARD; g++)
            assert_int_equal(dst[len + g], 0);
    }
}

static void test_copy_near(void **state)
{
    static const struct {
        long off;
        int near;
    } cases[] = {{0, 0},  {1, 1},    {16, 1},  {31, 1},  {63, 1},     {64, 0},
                 {65, 0}, {4095, 0}, {4096, 0}, {4097, 1}, {8192 + 62, 1}, {-1, 0},
                 {-16, 0}, {-4095, 1}};
    static unsigned char buf[3 * 8192];
    const unsigned char *src = buf + 8192;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(shoal_copy_near(src + cases[i].off, src), cases[i].near);
}

/* One way of the copier learns from copies at offset off (dst - src);
 * the other is left alone. */
static void copier_learns_at(long off)
{
    size_t big = SHOAL_COPY_LEARN_MIN + 3, small = SHOAL_COPY_LEARN_MIN - 1;
    unsigned char *buf = page_alloc(4 * 8192 + 2 * big);
    assert_non_null(buf);
    unsigned char *src = buf, *dst = buf + 2 * 8192 + off;
    int near = shoal_copy_near(dst, src);
    long mod = ((off % 4096) + 4096) % 4096;
    assert_int_equal(near, mod > 0 && mod < 64);
    shoal_copier_t c;
    shoal_copier_init(&c, SHOAL_COPY_AUTO, "test copies", 0);
    shoal_copy_way_t *w = &c.way[near], *other = &c.way[!near];
    /* Below the minimum: copied, never timed. */
    copier_run(&c, dst, src, small, 3 * SHOAL_COPY_LEARN_N);
    assert_int_equal(w->n[0] + w->n[1], 0);
    assert_int_equal(w->kind, SHOAL_COPY_AUTO);
    /* In turn: libc's first, then the vector's. */
    copier_run(&c, dst, src, big, 1);
    assert_int_equal(w->n[0], 1);
    assert_int_equal(w->n[1], 0);
    copier_run(&c, dst, src, big, 1);
    assert_int_equal(w->n[1], 1);
    /* Until it decides: at SHOAL_COPY_LEARN_N of each, or from
     * SHOAL_COPY_LEARN_EARLY of each where one kind's median took more
     * than SHOAL_COPY_LOPSIDED times as long per byte, never before. */
    unsigned timed = 2;
    while (w->kind == SHOAL_COPY_AUTO && timed < 2 * SHOAL_COPY_LEARN_N) {
        copier_run(&c, dst, src, big, 1);
        timed++;
        assert_int_equal(w->n[0] + w->n[1], timed);
    }
    assert_true(w->kind == SHOAL_COPY_LIBC || w->kind == SHOAL_COPY_VECTOR);
    assert_true(w->n[0] == w->n[1]);
    assert_true(w->n[0] >= SHOAL_COPY_LEARN_EARLY && w->n[0] <= SHOAL_COPY_LEARN_N);
    /* Every copy's time kept, none faulted; the decision on the medians,
     * with libc's kept unless the vector's is below 1 / MARGIN of it. */
    assert_int_equal(w->faulted, 0);
    double med[2];
    for (int k = 0; k < 2; k++) {
        float v[SHOAL_COPY_LEARN_N];
        memcpy(v, w->ns_per_kib[k], w->n[k] * sizeof(float));
        for (uint32_t i = 0; i < w->n[k]; i++) {
            assert_true(v[i] > 0);
            for (uint32_t j = i + 1; j < w->n[k]; j++) {
                if (v[j] < v[i]) {
                    float t = v[i];
                    v[i] = v[j];
                    v[j] = t;
                }
            }
        }
        uint32_t m = w->n[k];
        med[k] = m % 2 ? v[m / 2] : 0.5 * ((double)v[m / 2 - 1] + (double)v[m / 2]);
    }
    double libc = med[0], vec = med[1];
    if (w->n[0] < SHOAL_COPY_LEARN_N)
        assert_true(libc > SHOAL_COPY_LOPSIDED * vec || vec > SHOAL_COPY_LOPSIDED * libc);
    assert_int_equal(w->kind, vec * SHOAL_COPY_MARGIN < libc ? SHOAL_COPY_VECTOR
                                                             : SHOAL_COPY_LIBC);
    /* Decided: no more timing, the copies stay exact. */
    copier_run(&c, dst, src, big, 4);
    copier_run(&c, dst, src, 1, 4);
    assert_int_equal(w->n[0] + w->n[1], timed);
    /* The copies of the other offsets still learn. */
    assert_int_equal(other->kind, SHOAL_COPY_AUTO);
    assert_int_equal(other->n[0] + other->n[1], 0);
    free(buf);
}

static void test_copier_learns(void **state)
{
    copier_learns_at(0);
    copier_learns_at(16);
    copier_learns_at(4096 + 63);
    copier_learns_at(-16);
}

/* A copy that takes page faults (into memory written for the first time)
 * is not counted, and the same kind copies next; past SHOAL_COPY_LEARN_N
 * of them, such copies count too. */
static void test_copier_skips_faults(void **state)
{
    size_t big = 4 * 4096;
    unsigned char *src = page_alloc(big);
    size_t room = (SHOAL_COPY_LEARN_N + 1) * big;
    unsigned char *fresh = mmap(NULL, room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                -1, 0);
    assert_non_null(src);
    assert_true(fresh != MAP_FAILED);
    for (size_t i = 0; i < big; i++)
        src[i] = (unsigned char)(i * 7 + 1);
    shoal_copier_t c;
    shoal_copier_init(&c, SHOAL_COPY_AUTO, "test copies", 0);
    shoal_copy_way_t *w = &c.way[shoal_copy_near(fresh, src)];
    for (unsigned i = 0; i < SHOAL_COPY_LEARN_N; i++) {
        shoal_copier_copy(&c, fresh + i * big, src, big);
        assert_int_equal(w->faulted, i + 1);
        assert_int_equal(w->n[0] + w->n[1], 0);
    }
    /* Past the cap a faulting copy counts (libc's turn), and so does one
     * into memory already written (the vector's). */
    shoal_copier_copy(&c, fresh + SHOAL_COPY_LEARN_N * big, src, big);
    assert_int_equal(w->n[0], 1);
    shoal_copier_copy(&c, fresh, src, big);
    assert_int_equal(w->n[1], 1);
    assert_int_equal(w->faulted, SHOAL_COPY_LEARN_N);
    for (unsigned i = 0; i <= SHOAL_COPY_LEARN_N; i++)
        assert_memory_equal(fresh + i * big, src, big);
    munmap(fresh, room);
    free(src);
}

static void test_copier_named_kind(void **state)
{
    size_t big = 2 * SHOAL_COPY_LEARN_MIN;
    unsigned char *src = malloc(big), *dst = malloc(big + GUARD);
    assert_non_null(src);
    assert_non_null(dst);
    for (int kind = SHOAL_COPY_LIBC; kind < SHOAL_COPY_NKINDS; kind++) {
        shoal_copier_t c;
        shoal_copier_init(&c, (shoal_copy_kind_t)kind, "test copies", 0);
        copier_run(&c, dst, src, big, 3 * SHOAL_COPY_LEARN_N);
        /* Near: 16 bytes past the source, modulo 4 KiB. */
        unsigned char *far = page_alloc(4 * big + 8192);
        assert_non_null(far);
        copier_run(&c, far + 2 * big + 16, far, big, SHOAL_COPY_LEARN_N);
        free(far);
        for (int near = 0; near < 2; near++) {
            assert_int_equal(c.way[near].kind, kind);
            assert_int_equal(c.way[near].n[0] + c.way[near].n[1], 0);
        }
    }
    free(src);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_stream),
        cmocka_unit_test(test_copy_vector),
        cmocka_unit_test(test_copy_kinds),
        cmocka_unit_test(test_copy_near),
        cmocka_unit_test(test_copier_learns),
        cmocka_unit_test(test_copier_skips_faults),
        cmocka_unit_test(test_copier_named_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
