/* Logging: SHOAL_DEBUG_FILE with %h and %p, level and subsystem filters,
 * errno left as it was, the thread's last error. */
#include "harness.h"

#include "base/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_file_level_subsys(void **state)
{
    (void)state;
    char dir[] = "/tmp/shoal-log-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char pattern[256];
    snprintf(pattern, sizeof(pattern), "%s/log.%%h.%%p", dir);
    fflush(NULL);
    int pid = fork();
    if (pid == 0) {
        harness_setenv("SHOAL_DEBUG_FILE", pattern);
        harness_setenv("SHOAL_DEBUG", "info");
        harness_setenv("SHOAL_DEBUG_SUBSYS", "INIT,SHM");
        errno = 42;
        shoal_info(INIT, "visible-init %d", 1);
        shoal_info(SHM, "visible-shm");
        shoal_info(TCP, "hidden-tcp");
        shoal_debug(INIT, "hidden-debug");
        _exit(errno == 42 ? 0 : 3);
    }
    assert_int_equal(harness_wait(pid, 30), 0);
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    char path[512];
    snprintf(path, sizeof(path), "%s/log.%s.%d", dir, host, pid);
    char *text = read_file(path);
    assert_non_null(text);
    assert_non_null(strstr(text, "visible-init 1"));
    assert_non_null(strstr(text, "visible-shm"));
    assert_null(strstr(text, "hidden-tcp"));
    assert_null(strstr(text, "hidden-debug"));
    assert_non_null(strstr(text, "INFO"));
    unlink(path);
    rmdir(dir);
}

static void test_excluded_subsys_and_none(void **state)
{
    (void)state;
    char path[] = "/tmp/shoal-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    fflush(NULL);
    int pid = fork();
    if (pid == 0) {
        harness_setenv("SHOAL_DEBUG_FILE", path);
        harness_setenv("SHOAL_DEBUG", "trace");
        harness_setenv("SHOAL_DEBUG_SUBSYS", "^TCP");
        shoal_trace(BOOT, "boot-trace");
        shoal_error(TCP, "tcp-error");
        harness_setenv("SHOAL_DEBUG", "none");
        shoal_error(BOOT, "after-none");
        _exit(0);
    }
    assert_int_equal(harness_wait(pid, 30), 0);
    char *text = read_file(path);
    assert_non_null(text);
    assert_non_null(strstr(text, "boot-trace"));
    assert_null(strstr(text, "tcp-error"));
    assert_null(strstr(text, "after-none"));
    unlink(path);
}

/* The thread's last error is kept whether or not it is written, and only
 * errors count. */
static void test_last_error(void **state)
{
    (void)state;
    fflush(NULL);
    int pid = fork();
    if (pid == 0) {
        harness_setenv("SHOAL_DEBUG", "none");
        shoal_log_clear_error();
        int ok = shoal_log_last_error()[0] == '\0';
        shoal_error(BOOT, "first %d", 1);
        shoal_warn(BOOT, "a warning");
        ok = ok && strcmp(shoal_log_last_error(), "first 1") == 0;
        errno = EPIPE;
        shoal_error(TCP, "second");
        ok = ok && errno == EPIPE && strcmp(shoal_log_last_error(), "second") == 0;
        shoal_log_clear_error();
        _exit(ok && shoal_log_last_error()[0] == '\0' ? 0 : 1);
    }
    assert_int_equal(harness_wait(pid, 30), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_level_subsys),
        cmocka_unit_test(test_excluded_subsys_and_none),
        cmocka_unit_test(test_last_error),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
