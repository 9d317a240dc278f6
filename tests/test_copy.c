/* The payload copies (base/copy.h) against memcpy: every length around
 * their loop's step, head and tail, every alignment of source and
 * destination, no byte written outside the destination; and the learning
 * copier: it takes both kinds in turn, decides once it has timed enough of
 * each, never times a copy below its minimum, and keeps a named kind
 * without timing anything. */
#include "harness.h"

#include "base/copy.h"

#include <stdlib.h>
#include <string.h>

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

static void test_copier_learns(void **state)
{
    size_t big = SHOAL_COPY_LEARN_MIN + 3, small = SHOAL_COPY_LEARN_MIN - 1;
    unsigned char *src = malloc(big), *dst = malloc(big + GUARD);
    assert_non_null(src);
    assert_non_null(dst);
    shoal_copier_t c;
    shoal_copier_init(&c, SHOAL_COPY_AUTO, "test copies", 0);
    /* Below the minimum: copied, never timed. */
    copier_run(&c, dst, src, small, 3 * SHOAL_COPY_LEARN_N);
    assert_int_equal(c.n[0] + c.n[1], 0);
    assert_int_equal(c.kind, SHOAL_COPY_AUTO);
    /* In turn: libc's first, then the vector's. */
    copier_run(&c, dst, src, big, 1);
    assert_int_equal(c.n[0], 1);
    assert_int_equal(c.n[1], 0);
    copier_run(&c, dst, src, big, 1);
    assert_int_equal(c.n[1], 1);
    copier_run(&c, dst, src, big, 2 * SHOAL_COPY_LEARN_N - 3);
    assert_int_equal(c.kind, SHOAL_COPY_AUTO);
    assert_int_equal(c.n[0], SHOAL_COPY_LEARN_N);
    assert_int_equal(c.n[1], SHOAL_COPY_LEARN_N - 1);
    copier_run(&c, dst, src, big, 1);
    assert_true(c.kind == SHOAL_COPY_LIBC || c.kind == SHOAL_COPY_VECTOR);
    assert_int_equal(c.bytes[0], (uint64_t)SHOAL_COPY_LEARN_N * big);
    assert_int_equal(c.bytes[1], (uint64_t)SHOAL_COPY_LEARN_N * big);
    assert_true(c.ns[0] > 0 && c.ns[1] > 0);
    /* Decided: no more timing, the copies stay exact. */
    copier_run(&c, dst, src, big, 4);
    copier_run(&c, dst, src, 1, 4);
    assert_int_equal(c.n[0] + c.n[1], 2 * SHOAL_COPY_LEARN_N);
    free(src);
    free(dst);
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
        assert_int_equal(c.kind, kind);
        assert_int_equal(c.n[0] + c.n[1], 0);
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
        cmocka_unit_test(test_copier_learns),
        cmocka_unit_test(test_copier_named_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
