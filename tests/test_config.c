/* Settings: the typed parsers, and reloading the table from a changed
 * environment, with the default taking over from a value that does not
 * parse. */
#include "harness.h"

#include "core/config.h"

#include <stdlib.h>
#include <string.h>

#define NS_PER_S 1000000000ull

static void check_size(const char *text, size_t want)
{
    size_t v = 12345;
    if (shoal_config_parse_size(text, &v) != 0)
        fail_msg("size \"%s\" rejected", text);
    if (v != want)
        fail_msg("size \"%s\" gave %zu, want %zu", text, v, want);
}

static void check_size_bad(const char *text)
{
    size_t v = 12345;
    if (shoal_config_parse_size(text, &v) == 0)
        fail_msg("size \"%s\" accepted as %zu", text, v);
    assert_int_equal(v, 12345); /* untouched on failure */
}

static void check_time(const char *text, uint64_t want)
{
    uint64_t v = 12345;
    if (shoal_config_parse_time_ns(text, &v) != 0)
        fail_msg("time \"%s\" rejected", text);
    if (v != want)
        fail_msg("time \"%s\" gave %llu ns, want %llu", text, (unsigned long long)v,
                 (unsigned long long)want);
}

static void check_time_bad(const char *text)
{
    uint64_t v = 12345;
    if (shoal_config_parse_time_ns(text, &v) == 0)
        fail_msg("time \"%s\" accepted as %llu ns", text, (unsigned long long)v);
    assert_int_equal(v, 12345);
}

static void check_bool(const char *text, int want)
{
    int v = 7;
    if (shoal_config_parse_bool(text, &v) != 0)
        fail_msg("bool \"%s\" rejected", text);
    if (v != want)
        fail_msg("bool \"%s\" gave %d", text, v);
}

static void check_bool_bad(const char *text)
{
    int v = 7;
    if (shoal_config_parse_bool(text, &v) == 0)
        fail_msg("bool \"%s\" accepted as %d", text, v);
    assert_int_equal(v, 7);
}

static void test_config_parse_size(void **state)
{
    check_size("0", 0);
    check_size("4096", 4096);
    check_size("8k", 8192);
    check_size("8K", 8192);
    check_size("8kb", 8192);
    check_size("1M", 1u << 20);
    check_size("1m", 1u << 20);
    check_size("1G", 1u << 30);
    check_size("3g", 3ull << 30);

    check_size_bad("");
    check_size_bad("k");
    check_size_bad("garbage");
    check_size_bad("8x");
    check_size_bad("8kk");
    check_size_bad("1T");
    check_size_bad("8 k");
    check_size_bad("-1");
    check_size_bad("1.5M");
    check_size_bad("99999999999999999999");   /* beyond 64 bits */
    check_size_bad("17179869184G");           /* 2^34 G overflows */
}

static void test_config_parse_time(void **state)
{
    check_time("0", 0);
    check_time("5", 5 * NS_PER_S); /* seconds by default */
    check_time("30s", 30 * NS_PER_S);
    check_time("10ms", 10 * 1000000ull);
    check_time("250us", 250 * 1000ull);
    check_time("7ns", 7);
    check_time("2m", 120 * NS_PER_S);
    check_time("2min", 120 * NS_PER_S);
    check_time("1.5s", 1500000000ull);

    check_time_bad("");
    check_time_bad("s");
    check_time_bad("garbage");
    check_time_bad("10x");
    check_time_bad("10 ms");
    check_time_bad("10mss");
    check_time_bad("-1s");
    check_time_bad("inf");
    check_time_bad("1e30s");
}

/* Text that strto* reads past what the table means: a sign after leading
 * blanks, and NaN, whose conversion to an integer is undefined. */
static void test_config_parse_rejects_blank_sign_and_nan(void **state)
{
    check_size_bad(" -1");
    check_size_bad("+8k");
    check_time_bad("nan");
    check_time_bad("-nan");
    check_time_bad("nans");
}

static void test_config_parse_bool(void **state)
{
    static const char *const yes[] = {"y", "Y", "yes", "YES", "1", "true", "True", "on"};
    static const char *const no[] = {"n", "N", "no", "No", "0", "false", "FALSE", "off"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        check_bool(yes[i], 1);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        check_bool(no[i], 0);
    check_bool_bad("");
    check_bool_bad("2");
    check_bool_bad("maybe");
    check_bool_bad("yess");
    check_bool_bad(" y");
}

static void set_env(const char *name, const char *value)
{
    if (value)
        assert_int_equal(setenv(name, value, 1), 0);
    else
        assert_int_equal(unsetenv(name), 0);
    shoal_config_reload();
}

static void test_config_reload(void **state)
{
    set_env("SHOAL_TIMEOUT", NULL);
    assert_true(shoal_config_get()->core.timeout_ns == 300 * NS_PER_S);

    set_env("SHOAL_TIMEOUT", "10s");
    assert_true(shoal_config_get()->core.timeout_ns == 10 * NS_PER_S);

    set_env("SHOAL_TIMEOUT", "250ms");
    assert_true(shoal_config_get()->core.timeout_ns == 250 * 1000000ull);

    /* A value that does not parse gives the default, not the last value. */
    set_env("SHOAL_TIMEOUT", "soon");
    assert_true(shoal_config_get()->core.timeout_ns == 300 * NS_PER_S);

    set_env("SHOAL_TIMEOUT", NULL);
    assert_true(shoal_config_get()->core.timeout_ns == 300 * NS_PER_S);
}

static void test_config_reload_other_types(void **state)
{
    set_env("SHOAL_SHM_ENABLE", "n");
    assert_int_equal(shoal_config_get()->shm.enable, 0);
    set_env("SHOAL_SHM_ENABLE", "perhaps");
    assert_int_equal(shoal_config_get()->shm.enable, 1);
    set_env("SHOAL_SHM_ENABLE", NULL);

    set_env("SHOAL_CHUNK_SIZE", "1M");
    assert_int_equal(shoal_config_get()->algo.chunk_size, 1u << 20);
    set_env("SHOAL_CHUNK_SIZE", "lots");
    assert_int_equal(shoal_config_get()->algo.chunk_size, 128u << 10);
    set_env("SHOAL_CHUNK_SIZE", NULL);

    set_env("SHOAL_ALGO", "ring");
    assert_string_equal(shoal_config_get()->algo.algo, "ring");
    set_env("SHOAL_ALGO", NULL);
    assert_string_equal(shoal_config_get()->algo.algo, "auto");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_parse_size),
        cmocka_unit_test(test_config_parse_time),
        cmocka_unit_test(test_config_parse_rejects_blank_sign_and_nan),
        cmocka_unit_test(test_config_parse_bool),
        cmocka_unit_test(test_config_reload),
        cmocka_unit_test(test_config_reload_other_types),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
