/* Settings: the typed parsers, and reloading the table from a changed
 * environment, with the default taking over from a value that does not
 * parse; the NCCL_* aliases that the NCCL door turns on; the interface
 * names that SHOAL_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME) selects. */
#include "harness.h"

#include "algos/algo.h"
#include "base/config.h"
#include "base/copy.h"
#include "base/log.h"
#include "base/sock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    assert_int_equal(shoal_config_chunk(shoal_config_get(), 0), 1u << 20);
    assert_int_equal(shoal_config_chunk(shoal_config_get(), 1), 1u << 20);
    set_env("SHOAL_CHUNK_SIZE", "lots");
    assert_int_equal(shoal_config_get()->algo.chunk_size, 0);
    set_env("SHOAL_CHUNK_SIZE", "12k");
    assert_int_equal(shoal_config_get()->algo.chunk_size, 0);
    set_env("SHOAL_CHUNK_SIZE", NULL);
    assert_int_equal(shoal_config_chunk(shoal_config_get(), 0), 128u << 10);
    assert_int_equal(shoal_config_chunk(shoal_config_get(), 1), 512u << 10);

    set_env("SHOAL_ALGO", "ring");
    assert_string_equal(shoal_config_get()->algo.algo, "ring");
    set_env("SHOAL_ALGO", NULL);
    assert_string_equal(shoal_config_get()->algo.algo, "auto");
}

/* The NCCL door's compression: off unless int8; a value it does not know
 * leaves it off (with a warning), as every setting falls back to its
 * default. */
static void test_config_compress(void **state)
{
    set_env("SHOAL_COMPRESS", NULL);
    set_env("SHOAL_COMPRESS_MIN", NULL);
    assert_int_equal(shoal_config_get()->compress.kind, 0);
    assert_int_equal(shoal_config_get()->compress.min_bytes, 1u << 20);
    set_env("SHOAL_COMPRESS", "int8");
    assert_int_equal(shoal_config_get()->compress.kind, SHOAL_COMPRESS_INT8);
    set_env("SHOAL_COMPRESS", "INT8");
    assert_int_equal(shoal_config_get()->compress.kind, SHOAL_COMPRESS_INT8);
    set_env("SHOAL_COMPRESS", "off");
    assert_int_equal(shoal_config_get()->compress.kind, 0);
    set_env("SHOAL_COMPRESS", "int4");
    assert_int_equal(shoal_config_get()->compress.kind, 0);
    set_env("SHOAL_COMPRESS", "ternary"); /* needs error feedback the door cannot keep */
    assert_int_equal(shoal_config_get()->compress.kind, 0);
    set_env("SHOAL_COMPRESS_MIN", "4M");
    assert_int_equal(shoal_config_get()->compress.min_bytes, 4u << 20);
    set_env("SHOAL_COMPRESS_MIN", "lots");
    assert_int_equal(shoal_config_get()->compress.min_bytes, 1u << 20);
    set_env("SHOAL_COMPRESS", NULL);
    set_env("SHOAL_COMPRESS_MIN", NULL);
}

/* The MPI door's path: auto unless shoal; SHOAL_MPI_LEARN within 1..100;
 * the tests' slow path off, shoal, mpi or near. */
static void test_config_mpi_path(void **state)
{
    set_env("SHOAL_MPI_PATH", NULL);
    set_env("SHOAL_MPI_LEARN", NULL);
    set_env("SHOAL_TEST_MPI_SLOW", NULL);
    const shoal_mpi_config_t *mc = &shoal_config_get()->mpi;
    assert_int_equal(mc->path, SHOAL_MPI_PATH_AUTO);
    assert_int_equal(mc->learn, 2);
    assert_int_equal(mc->test_slow, 0);
    set_env("SHOAL_MPI_PATH", "shoal");
    assert_int_equal(shoal_config_get()->mpi.path, SHOAL_MPI_PATH_SHOAL);
    set_env("SHOAL_MPI_PATH", "fastest");
    assert_int_equal(shoal_config_get()->mpi.path, SHOAL_MPI_PATH_AUTO);
    set_env("SHOAL_MPI_LEARN", "5");
    assert_int_equal(shoal_config_get()->mpi.learn, 5);
    set_env("SHOAL_MPI_LEARN", "0");
    assert_int_equal(shoal_config_get()->mpi.learn, 1);
    set_env("SHOAL_MPI_LEARN", "1000");
    assert_int_equal(shoal_config_get()->mpi.learn, 100);
    set_env("SHOAL_TEST_MPI_SLOW", "shoal");
    assert_int_equal(shoal_config_get()->mpi.test_slow, 1);
    set_env("SHOAL_TEST_MPI_SLOW", "mpi");
    assert_int_equal(shoal_config_get()->mpi.test_slow, 2);
    set_env("SHOAL_TEST_MPI_SLOW", "near");
    assert_int_equal(shoal_config_get()->mpi.test_slow, 3);
    set_env("SHOAL_TEST_MPI_SLOW", "rank1");
    assert_int_equal(shoal_config_get()->mpi.test_slow, 0);
    set_env("SHOAL_MPI_PATH", NULL);
    set_env("SHOAL_MPI_LEARN", NULL);
    set_env("SHOAL_TEST_MPI_SLOW", NULL);
}

static void test_config_copy(void **state)
{
    set_env("SHOAL_COPY", NULL);
    assert_int_equal(shoal_config_get()->algo.copy, SHOAL_COPY_AUTO);
    set_env("SHOAL_COPY", "vector");
    assert_int_equal(shoal_config_get()->algo.copy, SHOAL_COPY_VECTOR);
    set_env("SHOAL_COPY", "libc");
    assert_int_equal(shoal_config_get()->algo.copy, SHOAL_COPY_LIBC);
    set_env("SHOAL_COPY", "rep");
    assert_int_equal(shoal_config_get()->algo.copy, SHOAL_COPY_AUTO);
    set_env("SHOAL_COPY", NULL);
}

/* ---- interface names ----------------------------------------------------- */

static void test_ifname_selects(void **state)
{
    static const struct {
        const char *spec, *name;
        int want;
    } cases[] = {
        {"", "eth0", 1},           {"", "lo", 1},
        {"eth", "eth0", 1},        {"eth", "ib0", 0},         {"eth", "et", 0},
        {"eth,ib", "ib1", 1},      {"eth,ib", "lo", 0},       {",eth,", "eth3", 1},
        {"=eth0", "eth0", 1},      {"=eth0", "eth01", 0},     {"=eth0", "eth", 0},
        /* NCCL: a leading "=" makes the whole list exact. */
        {"=eth0,eth1", "eth1", 1}, {"=eth0,eth1", "eth10", 0},
        /* shoal: "=" before a later name makes just that one exact. */
        {"eth,=ib0", "eth7", 1},   {"eth,=ib0", "ib0", 1},    {"eth,=ib0", "ib01", 0},
        {"^docker,lo", "docker0", 0}, {"^docker,lo", "lo", 0}, {"^docker,lo", "eth0", 1},
        {"^docker,lo", "dock", 1}, {"^=eth1", "eth1", 0},     {"^=eth1", "eth10", 1},
        {"^=eth1,eth2", "eth20", 1}, {"^", "eth0", 1},        {"=", "eth0", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = shoal_sock_ifname_selects(cases[i].spec, cases[i].name);
        if (got != cases[i].want)
            fail_msg("SOCKET_IFNAME \"%s\" %s \"%s\"", cases[i].spec,
                     got ? "selects" : "does not select", cases[i].name);
    }
}

/* ---- NCCL aliases ---------------------------------------------------------
 * Once on, the aliases stay on for the life of a process, so every case
 * runs in a child of its own: its body returns 0, or reports (RANK_CHECK)
 * and returns 1. The child logs to a file of its own, where the tests look
 * for the settings' warnings and notes. */

static const char *const alias_vars[] = {
    "SHOAL_DEBUG",      "NCCL_DEBUG",      "SHOAL_DEBUG_SUBSYS",  "NCCL_DEBUG_SUBSYS",
    "SHOAL_DEBUG_FILE", "NCCL_DEBUG_FILE", "SHOAL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
    "SHOAL_COMM_ID",    "NCCL_COMM_ID",    "SHOAL_ALGO",          "NCCL_ALGO",
    "SHOAL_IB_ENABLE",  "NCCL_IB_DISABLE", "SHOAL_IB_QPS_PER_CONN", "NCCL_IB_QPS_PER_CONNECTION",
};

static char child_log[256];

static void child_log_name(void)
{
    snprintf(child_log, sizeof(child_log), "/tmp/shoal-cfg-%d.log", (int)getpid());
}

static void run_child(int (*body)(void))
{
    fflush(NULL);
    int pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (size_t i = 0; i < sizeof(alias_vars) / sizeof(alias_vars[0]); i++)
            unsetenv(alias_vars[i]);
        child_log_name();
        unlink(child_log);
        setenv("SHOAL_DEBUG_FILE", child_log, 1);
        shoal_config_reload();
        int rc = body();
        child_log_name();
        unlink(child_log);
        _exit(rc);
    }
    assert_int_equal(harness_wait(pid, 30), 0);
}

/* How many times the child's log holds text. */
static int log_count(const char *text)
{
    static char buf[1 << 16];
    FILE *f = fopen(child_log, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    int count = 0;
    for (const char *p = buf; (p = strstr(p, text)); p += strlen(text))
        count++;
    return count;
}

static void env(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    shoal_config_reload();
}

static int aliases_ignored_before_use(void)
{
    setenv("NCCL_DEBUG", "TRACE", 1);
    setenv("NCCL_DEBUG_SUBSYS", "NET", 1);
    setenv("NCCL_ALGO", "Tree", 1);
    setenv("NCCL_SOCKET_IFNAME", "=eth0", 1);
    setenv("NCCL_COMM_ID", "10.1.2.3:4567", 1);
    setenv("NCCL_IB_DISABLE", "1", 1);
    setenv("NCCL_IB_QPS_PER_CONNECTION", "4", 1);
    shoal_config_reload();
    const shoal_config_t *c = shoal_config_get();
    RANK_CHECK(c->ib.enable == 1 && c->ib.qps == 1, fail, "ib %d, %d queue pairs", c->ib.enable,
               c->ib.qps);
    RANK_CHECK(c->core.log_level == SHOAL_LOG_WARN, fail, "level %d", c->core.log_level);
    RANK_CHECK(c->core.log_subsys == SHOAL_SUBSYS_ALL, fail, "subsys %#x", c->core.log_subsys);
    RANK_CHECK(!strcmp(c->algo.algo, "auto"), fail, "algo %s", c->algo.algo);
    RANK_CHECK(!c->boot.socket_ifname[0], fail, "ifname %s", c->boot.socket_ifname);
    RANK_CHECK(!c->boot.comm_id[0], fail, "comm id %s", c->boot.comm_id);

    shoal_config_use_nccl_env();
    RANK_CHECK(c->core.log_level == SHOAL_LOG_TRACE, fail, "level %d", c->core.log_level);
    RANK_CHECK(c->core.log_subsys == (SHOAL_SUBSYS(TCP) | SHOAL_SUBSYS(IBV)), fail, "subsys %#x",
               c->core.log_subsys);
    RANK_CHECK(!strcmp(c->algo.algo, "allreduce:tree"), fail, "algo %s", c->algo.algo);
    RANK_CHECK(!strcmp(c->boot.socket_ifname, "=eth0"), fail, "ifname %s", c->boot.socket_ifname);
    RANK_CHECK(!strcmp(c->boot.comm_id, "10.1.2.3:4567"), fail, "comm id %s", c->boot.comm_id);
    RANK_CHECK(c->ib.enable == 0 && c->ib.qps == 4, fail, "NCCL_IB_DISABLE=1 gave ib %d, "
               "NCCL_IB_QPS_PER_CONNECTION=4 %d queue pairs", c->ib.enable, c->ib.qps);
    /* Still on after a reload. */
    shoal_config_reload();
    RANK_CHECK(!strcmp(c->algo.algo, "allreduce:tree"), fail, "algo %s after reload", c->algo.algo);
    return 0;
fail:
    return 1;
}

static void test_nccl_aliases_ignored_before_use(void **state)
{
    run_child(aliases_ignored_before_use);
}

/* The door's call may be the first look at the settings: then there is one
 * load, with the aliases on, so its notes are logged once. A forked child
 * inherits settings already loaded, so this one runs the test binary
 * again, where main hands over to nccl_env_first. */
#define NCCL_ENV_FIRST_ARG "--nccl-env-first"

static int use_before_any_load(void)
{
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_ALGO", "ring,tree", 1);
    char *argv[] = {"test_config", NCCL_ENV_FIRST_ARG, NULL};
    execv("/proc/self/exe", argv);
    fprintf(stderr, "# execv: %s\n", strerror(errno));
    return 1;
}

static int nccl_env_first_checks(void)
{
    shoal_config_use_nccl_env();
    const shoal_config_t *c = shoal_config_get();
    RANK_CHECK(c->core.log_level == SHOAL_LOG_INFO, fail, "level %d", c->core.log_level);
    RANK_CHECK(log_count("NCCL_ALGO=\"ring,tree\" read as SHOAL_ALGO") == 1, fail,
               "the alias note is not logged exactly once");
    RANK_CHECK(log_count("allreduce: ring and tree allowed, the cost model chooses") == 1, fail,
               "no note on the all-reduce choice");
    return 0;
fail:
    return 1;
}

static int nccl_env_first(void)
{
    child_log_name();
    int rc = nccl_env_first_checks();
    unlink(child_log);
    return rc;
}

static void test_nccl_use_before_any_load(void **state)
{
    run_child(use_before_any_load);
}

static int check_level(const char *nccl, int want)
{
    env("NCCL_DEBUG", nccl);
    int got = shoal_config_get()->core.log_level;
    RANK_CHECK(got == want, fail, "NCCL_DEBUG=%s gave level %d, want %d", nccl, got, want);
    return 0;
fail:
    return 1;
}

static int nccl_debug(void)
{
    shoal_config_use_nccl_env();
    int bad = check_level("VERSION", SHOAL_LOG_WARN) || check_level("WARN", SHOAL_LOG_WARN) ||
              check_level("warn", SHOAL_LOG_WARN) || check_level("INFO", SHOAL_LOG_INFO) ||
              check_level("Info", SHOAL_LOG_INFO) || check_level("TRACE", SHOAL_LOG_TRACE) ||
              check_level("ABORT", SHOAL_LOG_ERROR) || check_level("abort", SHOAL_LOG_ERROR);
    /* Empty is unset, as for NCCL; anything else NCCL does not know falls
     * back to the default, with a warning. */
    bad = bad || check_level("", SHOAL_LOG_WARN) || check_level("LOUD", SHOAL_LOG_WARN) ||
          check_level("debug", SHOAL_LOG_WARN);
    RANK_CHECK(!bad, fail, "see above");
    RANK_CHECK(log_count("cannot read NCCL_DEBUG=\"LOUD\" as SHOAL_DEBUG; using its default") == 1,
               fail, "no warning for NCCL_DEBUG=LOUD");
    RANK_CHECK(log_count("cannot read NCCL_DEBUG=\"debug\"") == 1, fail,
               "no warning for NCCL_DEBUG=debug");
    return 0;
fail:
    return 1;
}

static void test_nccl_debug(void **state)
{
    run_child(nccl_debug);
}

static int check_subsys(const char *nccl, unsigned want)
{
    env("NCCL_DEBUG_SUBSYS", nccl);
    unsigned got = shoal_config_get()->core.log_subsys;
    RANK_CHECK(got == want, fail, "NCCL_DEBUG_SUBSYS=%s gave %#x, want %#x", nccl, got, want);
    return 0;
fail:
    return 1;
}

static int nccl_debug_subsys(void)
{
    const unsigned all = SHOAL_SUBSYS_ALL, net = SHOAL_SUBSYS(TCP) | SHOAL_SUBSYS(IBV);
    shoal_config_use_nccl_env();
    int bad = check_subsys("INIT", SHOAL_SUBSYS(INIT)) || check_subsys("ENV", SHOAL_SUBSYS(INIT)) ||
              check_subsys("COLL", SHOAL_SUBSYS(ALGO)) || check_subsys("P2P", SHOAL_SUBSYS(ALGO)) ||
              check_subsys("tuning", SHOAL_SUBSYS(ALGO)) || check_subsys("SHM", SHOAL_SUBSYS(SHM)) ||
              check_subsys("NET", net) || check_subsys("GRAPH", SHOAL_SUBSYS(TOPO)) ||
              check_subsys("BOOTSTRAP", SHOAL_SUBSYS(BOOT)) ||
              check_subsys("ALLOC", SHOAL_SUBSYS(MEM)) || check_subsys("REG", SHOAL_SUBSYS(MEM)) ||
              check_subsys("NVLS", SHOAL_SUBSYS(CUDA)) || check_subsys("ALL", all) ||
              check_subsys("INIT,NET,GRAPH", SHOAL_SUBSYS(INIT) | net | SHOAL_SUBSYS(TOPO));
    /* Names without a shoal counterpart select nothing, and are no error. */
    bad = bad || check_subsys("CALL,PROXY,PROFILE,RAS", 0) ||
          check_subsys("INIT,CALL", SHOAL_SUBSYS(INIT));
    /* "^" excludes. */
    bad = bad || check_subsys("^NET", all & ~net) ||
          check_subsys("^INIT,COLL", all & ~(SHOAL_SUBSYS(INIT) | SHOAL_SUBSYS(ALGO))) ||
          check_subsys("^CALL", all) || check_subsys("^ALL", 0);
    /* Names NCCL does not know: the default, with a warning. */
    bad = bad || check_subsys("NETWORK", all) || check_subsys("INIT,bogus", all);
    RANK_CHECK(!bad, fail, "see above");
    RANK_CHECK(log_count("cannot read NCCL_DEBUG_SUBSYS=\"NETWORK\"") == 1, fail,
               "no warning for NCCL_DEBUG_SUBSYS=NETWORK");
    return 0;
fail:
    return 1;
}

static void test_nccl_debug_subsys(void **state)
{
    run_child(nccl_debug_subsys);
}

static int nccl_debug_file(void)
{
    char dir[] = "/tmp/shoal-ncclf-XXXXXX";
    RANK_CHECK(mkdtemp(dir), fail, "mkdtemp: %s", strerror(errno));
    char pattern[128], host[64] = "";
    snprintf(pattern, sizeof(pattern), "%s/nccl.%%h.%%p", dir);
    gethostname(host, sizeof(host) - 1);
    setenv("NCCL_DEBUG_FILE", pattern, 1);
    unsetenv("SHOAL_DEBUG_FILE");
    shoal_config_use_nccl_env();
    RANK_CHECK(!strcmp(shoal_config_get()->core.log_file, pattern), fail, "log file %s",
               shoal_config_get()->core.log_file);
    shoal_warn(INIT, "marker-of-the-nccl-file");
    snprintf(child_log, sizeof(child_log), "%s/nccl.%s.%d", dir, host, (int)getpid());
    int found = log_count("marker-of-the-nccl-file");
    unlink(child_log);
    rmdir(dir);
    RANK_CHECK(found == 1, fail, "no log line in %s", child_log);
    return 0;
fail:
    return 1;
}

static void test_nccl_debug_file(void **state)
{
    run_child(nccl_debug_file);
}

static int nccl_socket_ifname(void)
{
    shoal_config_use_nccl_env();
    static const char *const specs[] = {"=lo", "^docker,lo", "eth,ib", "^=eth1"};
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        env("NCCL_SOCKET_IFNAME", specs[i]);
        const char *got = shoal_config_get()->boot.socket_ifname;
        RANK_CHECK(!strcmp(got, specs[i]), fail, "NCCL_SOCKET_IFNAME=%s gave %s", specs[i], got);
    }
    /* The address that sockets use follows it. */
    env("NCCL_SOCKET_IFNAME", "=lo");
    shoal_sockaddr_t a;
    char text[SHOAL_SOCKADDR_STRLEN];
    RANK_CHECK(shoal_sock_pick_addr(&a) == SHOAL_OK, fail, "no address on lo");
    RANK_CHECK(!strcmp(shoal_sock_str(&a, text), "127.0.0.1:0"), fail, "address %s", text);
    env("NCCL_SOCKET_IFNAME", "=l");
    RANK_CHECK(shoal_sock_pick_addr(&a) != SHOAL_OK, fail,
               "=l is an exact name, not a prefix of lo");
    return 0;
fail:
    return 1;
}

static void test_nccl_socket_ifname(void **state)
{
    run_child(nccl_socket_ifname);
}

static int check_comm_id(const char *name, const char *text, const char *want)
{
    env(name, text);
    const char *got = shoal_config_get()->boot.comm_id;
    RANK_CHECK(!strcmp(got, want), fail, "%s=%s gave \"%s\", want \"%s\"", name, text, got, want);
    return 0;
fail:
    return 1;
}

static int nccl_comm_id(void)
{
    int bad = check_comm_id("SHOAL_COMM_ID", NULL, "") ||
              check_comm_id("SHOAL_COMM_ID", "10.0.0.1:29500", "10.0.0.1:29500") ||
              check_comm_id("SHOAL_COMM_ID", "[fe80::1]:80", "[fe80::1]:80") ||
              check_comm_id("SHOAL_COMM_ID", "node-7.example:65535", "node-7.example:65535");
    static const char *const bad_ids[] = {"10.0.0.1", "10.0.0.1:", ":80", "h:0", "h:65536",
                                          "h:8o", "[::1]", "::1:x", "h:123456"};
    for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++)
        bad = bad || check_comm_id("SHOAL_COMM_ID", bad_ids[i], "");
    env("SHOAL_COMM_ID", NULL);
    shoal_config_use_nccl_env();
    bad = bad || check_comm_id("NCCL_COMM_ID", "192.168.0.9:12345", "192.168.0.9:12345") ||
          check_comm_id("NCCL_COMM_ID", "nohost", "");
    RANK_CHECK(!bad, fail, "see above");
    RANK_CHECK(log_count("cannot parse SHOAL_COMM_ID=\"h:65536\"") == 1, fail,
               "no warning for h:65536");
    RANK_CHECK(log_count("NCCL_COMM_ID=\"nohost\" gives SHOAL_COMM_ID=\"nohost\", which does "
                         "not parse") == 1, fail, "no warning for NCCL_COMM_ID=nohost");
    return 0;
fail:
    return 1;
}

static void test_nccl_comm_id(void **state)
{
    run_child(nccl_comm_id);
}

/* NCCL_ALGO and the SHOAL_ALGO it becomes, which shoal must accept. */
static int check_algo(const char *nccl, const char *want)
{
    env("NCCL_ALGO", nccl);
    const char *got = shoal_config_get()->algo.algo;
    RANK_CHECK(!strcmp(got, want), fail, "NCCL_ALGO=%s gave SHOAL_ALGO=%s, want %s", nccl, got,
               want);
    RANK_CHECK(shoal_algo_check_setting() == SHOAL_OK, fail, "SHOAL_ALGO=%s is rejected", got);
    return 0;
fail:
    return 1;
}

static int nccl_algo(void)
{
    static const char *const rings =
        "broadcast:chain,reduce:chain,allgather:ring,reducescatter:ring,allreduce:ring";
    static const char *const rings_but_allreduce =
        "broadcast:chain,reduce:chain,allgather:ring,reducescatter:ring";
    /* shoal NULL: rings; "": rings but all-reduce, which the cost model
     * chooses. */
    static const struct {
        const char *nccl, *shoal;
    } cases[] = {
        {"Ring", NULL}, {"ring", NULL}, {"RING", NULL}, {"^tree", NULL},
        {"Tree", "allreduce:tree"}, {"tree", "allreduce:tree"}, {"^ring", "allreduce:tree"},
        {"ring,tree", ""}, {"Tree,Ring", ""}, {"^nvls", ""}, {"^pat,collnetdirect", ""},
        {"allreduce:tree;broadcast:ring", "broadcast:chain,allreduce:tree"},
        {"AllReduce:Tree;AllGather:Ring", "allgather:ring,allreduce:tree"},
        {"ring;allreduce:tree", "broadcast:chain,reduce:chain,allgather:ring,"
                                "reducescatter:ring,allreduce:tree"},
        {"tree;reduce:ring", "reduce:chain,allreduce:tree"},
        {"allreduce:^ring", "allreduce:tree"},
        /* Algorithms shoal lacks leave the choice to the cost model. */
        {"NVLS", "auto"}, {"ring,nvls", "auto"}, {"CollNetDirect,CollNetChain", "auto"},
        {"NVLSTree", "auto"}, {"PAT", "auto"}, {"allgather:pat;allreduce:ring", "allreduce:ring"},
        {"allreduce:collnetdirect,ring;broadcast:ring", "broadcast:chain"},
        {"^ring,tree", "auto"},
    };
    setenv("SHOAL_DEBUG", "info", 1);
    shoal_config_use_nccl_env();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *want = !cases[i].shoal     ? rings
                           : !cases[i].shoal[0] ? rings_but_allreduce
                                                : cases[i].shoal;
        if (check_algo(cases[i].nccl, want))
            return 1;
    }
    RANK_CHECK(log_count("allreduce: ring and tree allowed, the cost model chooses") >= 1, fail,
               "no note on ring,tree");
    RANK_CHECK(log_count("broadcast, reduce, allgather, reducescatter, allreduce: shoal has no "
                         "NVLS, the cost model chooses") == 2, fail, "no note on NVLS");
    RANK_CHECK(log_count("SHOAL_ALGO=\"broadcast:chain\": allreduce: shoal has no "
                         "CollNetDirect, the cost model chooses") == 1, fail,
               "no note on allreduce:collnetdirect,ring");
    /* Text NCCL rejects: the default, with a warning. */
    static const char *const bad[] = {"fast", "ring,,tree", "^", "allreduce:", "alltoall:ring",
                                      "allreduce:foo", "ring;tree", "ring;", "bcast:ring",
                                      "allreduce;ring"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (check_algo(bad[i], "auto"))
            return 1;
        char line[128];
        snprintf(line, sizeof(line), "cannot read NCCL_ALGO=\"%s\" as SHOAL_ALGO", bad[i]);
        RANK_CHECK(log_count(line) == 1, fail, "no warning for NCCL_ALGO=%s", bad[i]);
    }
    return check_algo("", "auto");
fail:
    return 1;
}

static void test_nccl_algo(void **state)
{
    run_child(nccl_algo);
}

/* A SHOAL_ variable that is set wins over its alias, even when its value
 * is bad: then its default applies, not the alias. */
static int nccl_precedence(void)
{
    const shoal_config_t *c = shoal_config_get();
    setenv("NCCL_DEBUG", "TRACE", 1);
    setenv("NCCL_ALGO", "tree", 1);
    setenv("NCCL_SOCKET_IFNAME", "eth", 1);
    setenv("NCCL_COMM_ID", "10.0.0.1:1", 1);
    setenv("NCCL_DEBUG_SUBSYS", "NET", 1);
    setenv("SHOAL_DEBUG", "error", 1);
    setenv("SHOAL_ALGO", "rhd", 1);
    setenv("SHOAL_SOCKET_IFNAME", "=lo", 1);
    setenv("SHOAL_COMM_ID", "10.0.0.2:2", 1);
    setenv("SHOAL_DEBUG_SUBSYS", "", 1);
    shoal_config_use_nccl_env();
    RANK_CHECK(c->core.log_level == SHOAL_LOG_ERROR, fail, "level %d", c->core.log_level);
    RANK_CHECK(!strcmp(c->algo.algo, "rhd"), fail, "algo %s", c->algo.algo);
    RANK_CHECK(!strcmp(c->boot.socket_ifname, "=lo"), fail, "ifname %s", c->boot.socket_ifname);
    RANK_CHECK(!strcmp(c->boot.comm_id, "10.0.0.2:2"), fail, "comm id %s", c->boot.comm_id);
    RANK_CHECK(c->core.log_subsys == 0, fail, "set but empty SHOAL_DEBUG_SUBSYS: %#x",
               c->core.log_subsys);

    unsetenv("NCCL_DEBUG_SUBSYS");
    env("SHOAL_DEBUG_SUBSYS", NULL);
    env("SHOAL_DEBUG", "info");
    RANK_CHECK(log_count("SHOAL_ALGO is set, so NCCL_ALGO=\"tree\" is ignored") == 1, fail,
               "no note on the ignored alias");
    env("SHOAL_DEBUG", "loud");
    RANK_CHECK(c->core.log_level == SHOAL_LOG_WARN, fail, "bad SHOAL_DEBUG: level %d",
               c->core.log_level);
    env("SHOAL_DEBUG", NULL);
    RANK_CHECK(c->core.log_level == SHOAL_LOG_TRACE, fail, "unset SHOAL_DEBUG: level %d",
               c->core.log_level);
    env("SHOAL_ALGO", NULL);
    RANK_CHECK(!strcmp(c->algo.algo, "allreduce:tree"), fail, "unset SHOAL_ALGO: %s", c->algo.algo);
    return 0;
fail:
    return 1;
}

static void test_nccl_precedence(void **state)
{
    run_child(nccl_precedence);
}

/* Whether shoal_config_print writes text. */
static int printed_has(const char *text)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return 0;
    shoal_config_print(f);
    fclose(f);
    int found = strstr(buf, text) != NULL;
    free(buf);
    return found;
}

static int nccl_print(void)
{
    env("NCCL_ALGO", "Tree");
    RANK_CHECK(printed_has("(shoal_info -a lists them) [NCCL alias: NCCL_ALGO, honoured by "
                           "libnccl]\n"), fail, "no alias in the doc line");
    RANK_CHECK(printed_has("[NCCL alias: NCCL_SOCKET_IFNAME, honoured by libnccl]"), fail,
               "no alias of SOCKET_IFNAME");
    RANK_CHECK(printed_has("SHOAL_ALGO             default=\"auto\" current=\"auto\"\n"), fail,
               "alias applied before it is on");
    RANK_CHECK(printed_has("blocking wait (init, collectives, teardown)\n"), fail,
               "an alias where there is none (SHOAL_TIMEOUT)");
    shoal_config_use_nccl_env();
    RANK_CHECK(printed_has("current=\"allreduce:tree\" (from NCCL_ALGO)\n"), fail,
               "value from the alias not shown");
    RANK_CHECK(printed_has("[NCCL alias: NCCL_COMM_ID]\n"), fail, "no alias once on");
    return 0;
fail:
    return 1;
}

static void test_nccl_print(void **state)
{
    run_child(nccl_print);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], NCCL_ENV_FIRST_ARG))
        return nccl_env_first();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_parse_size),
        cmocka_unit_test(test_config_parse_time),
        cmocka_unit_test(test_config_parse_rejects_blank_sign_and_nan),
        cmocka_unit_test(test_config_parse_bool),
        cmocka_unit_test(test_config_reload),
        cmocka_unit_test(test_config_reload_other_types),
        cmocka_unit_test(test_config_compress),
        cmocka_unit_test(test_config_mpi_path),
        cmocka_unit_test(test_config_copy),
        cmocka_unit_test(test_ifname_selects),
        cmocka_unit_test(test_nccl_aliases_ignored_before_use),
        cmocka_unit_test(test_nccl_use_before_any_load),
        cmocka_unit_test(test_nccl_debug),
        cmocka_unit_test(test_nccl_debug_subsys),
        cmocka_unit_test(test_nccl_debug_file),
        cmocka_unit_test(test_nccl_socket_ifname),
        cmocka_unit_test(test_nccl_comm_id),
        cmocka_unit_test(test_nccl_algo),
        cmocka_unit_test(test_nccl_precedence),
        cmocka_unit_test(test_nccl_print),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
