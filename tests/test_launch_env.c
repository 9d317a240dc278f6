/* shoal_comm_init_env: forked ranks that find each other through the
 * variables of each launcher, the port rules, refusal of a rank with another
 * secret, and the errors for missing or contradictory variables. Where the
 * secret comes from: SHOAL_SECRET_FILE (refused when others may read it),
 * SHOAL_SECRET through a salted scrypt, and SHOAL_AUTH (strict refuses a
 * launch with neither, warn says so on rank 0, off is silent), for the
 * launchers and for NCCL_COMM_ID ids alike. Every rank sets its own
 * environment after fork and re-reads the settings. */
#include "harness.h"

#include "base/config.h"
#include "core/launch.h"

#include <openssl/evp.h>
#include <sys/stat.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WAIT_S 120
#define MAX_PROCS 8

/* Every variable shoal_comm_init_env may read: cleared in each rank first,
 * so the environment the test runs in (a CI job under Slurm, say) does not
 * leak into a case. */
static const char *const launch_vars[] = {
    "SHOAL_RANK", "SHOAL_SIZE", "SHOAL_LOCAL_RANK", "SHOAL_ADDR", "SHOAL_PORT", "SHOAL_SECRET",
    "SHOAL_SECRET_FILE", "SHOAL_AUTH", "SHOAL_BOOTSTRAP_MAC", "SHOAL_COMM_ID", "SHOAL_DEBUG_FILE",
    "PMIX_NAMESPACE", "PMIX_RANK", "PMIX_SERVER_URI2", "PMIX_SERVER_URI21", "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI4", "PMIX_SERVER_URI41", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_MCA_ess_base_jobid", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEP_ID",
};

/* Ports of one case: port is free for rank 0 to listen on; master_port is
 * held listening by the parent, so a rank that used it would fail. */
typedef struct {
    int port;
    int master_port;
} ports_t;

typedef void (*setup_fn_t)(int rank, int nranks, const ports_t *p);

static void env_clear(void)
{
    for (size_t i = 0; i < sizeof(launch_vars) / sizeof(launch_vars[0]); i++)
        unsetenv(launch_vars[i]);
    setenv("SHOAL_TIMEOUT", "60s", 1);
}

static void env_int(const char *name, int v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%d", v);
    setenv(name, buf, 1);
}

static void env_addr(const char *name, int port)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "127.0.0.1:%d", port);
    setenv(name, buf, 1);
}

/* A socket on 127.0.0.1:port (0 = any free port), listening if asked. */
static int bind_local(int port, int do_listen, int *port_p)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof(sin);
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        (do_listen && listen(fd, 16) != 0) ||
        getsockname(fd, (struct sockaddr *)&sin, &len) != 0) {
        close(fd);
        return -1;
    }
    if (port_p)
        *port_p = ntohs(sin.sin_port);
    return fd;
}

static int free_port(void)
{
    int port = 0;
    int fd = bind_local(0, 0, &port);
    assert_true(fd >= 0);
    close(fd);
    return port;
}

/* Listen on a free port P whose successor P+1 is also free (for shoal's
 * default torchrun port); the caller keeps the socket while ranks run. */
static int hold_master_port(int *port_p)
{
    for (int tries = 0; tries < 100; tries++) {
        int port;
        int fd = bind_local(0, 1, &port);
        assert_true(fd >= 0);
        if (port < 65535) {
            int probe = bind_local(port + 1, 0, NULL);
            if (probe >= 0) {
                close(probe);
                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
                *port_p = port;
                return fd;
            }
        }
        close(fd);
    }
    fail_msg("no free pair of ports");
    return -1;
}

/* Nobody may have connected to the held MASTER_PORT. */
static void assert_untouched(int held_fd)
{
    int c = accept(held_fd, NULL, NULL);
    if (c >= 0)
        close(c);
    assert_true(c < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

/* A real rank: form the communicator, check the place it got, all-reduce. */
static int rank_body(int want_rank, int nranks)
{
    shoal_comm_t comm = NULL;
    shoal_status_t s = shoal_comm_init_env(&comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: shoal_comm_init_env: %s (%s)", want_rank,
               shoal_status_string(s), shoal_comm_last_error(NULL));
    int rank = -1, size = -1;
    RANK_CHECK(shoal_comm_rank(comm, &rank) == SHOAL_OK && rank == want_rank, fail, "rank %d != %d",
               rank, want_rank);
    RANK_CHECK(shoal_comm_size(comm, &size) == SHOAL_OK && size == nranks, fail, "size %d != %d",
               size, nranks);
    int64_t v[2] = {rank + 1, (int64_t)rank * rank};
    s = shoal_allreduce(v, v, 2, SHOAL_INT64, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "shoal_allreduce: %s", shoal_status_string(s));
    int64_t n = nranks;
    RANK_CHECK(v[0] == n * (n + 1) / 2 && v[1] == (n - 1) * n * (2 * n - 1) / 6, fail,
               "sums %lld %lld", (long long)v[0], (long long)v[1]);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* A process that tries to join and must not get in. */
static int impostor_body(void)
{
    shoal_comm_t comm = NULL;
    shoal_status_t s = shoal_comm_init_env(&comm);
    RANK_CHECK(s != SHOAL_OK, fail, "an impostor joined the communicator");
    RANK_CHECK(comm == NULL, fail, "comm written on failure");
    /* Refused by rank 0's proof, not merely left waiting. */
    RANK_CHECK(s == SHOAL_ERR_AUTH || s == SHOAL_ERR_PEER, fail, "impostor got %s",
               shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static pid_t spawn(int rank, int nranks, setup_fn_t setup, const ports_t *p, int impostor)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        env_clear();
        setup(rank, nranks, p);
        shoal_config_reload();
        int rc = impostor ? impostor_body() : rank_body(rank, nranks);
        fflush(NULL);
        _exit(rc ? 1 : 0);
    }
    assert_true(pid > 0);
    return pid;
}

static void wait_ok(pid_t pid, const char *what, int index)
{
    int rc = harness_wait(pid, WAIT_S);
    if (rc != 0)
        fail_msg("%s %d exited %d", what, index, rc);
}

/* nranks real ranks set up by setup. With an impostor: rank 0 starts, then
 * the impostor, and the other ranks only after the impostor has been turned
 * away, so it surely met rank 0 accepting and rank 0 went on accepting the
 * real ranks after it. */
static void run_case(int nranks, setup_fn_t setup, const ports_t *p, setup_fn_t impostor_setup)
{
    pid_t pids[MAX_PROCS];
    assert_true(nranks <= MAX_PROCS);
    int first = 0;
    if (impostor_setup) {
        pids[0] = spawn(0, nranks, setup, p, 0);
        wait_ok(spawn(1, nranks, impostor_setup, p, 1), "impostor", 0);
        first = 1;
    }
    for (int r = first; r < nranks; r++)
        pids[r] = spawn(r, nranks, setup, p, 0);
    for (int r = 0; r < nranks; r++)
        wait_ok(pids[r], "rank", r);
}

/* (i) SHOAL_RANK / SHOAL_SIZE / SHOAL_ADDR with a port. */
static void setup_shoal_vars(int rank, int nranks, const ports_t *p)
{
    env_int("SHOAL_RANK", rank);
    env_int("SHOAL_SIZE", nranks);
    env_int("SHOAL_LOCAL_RANK", rank);
    env_addr("SHOAL_ADDR", p->port);
    setenv("SHOAL_SECRET", "test shoal vars", 1);
}

static void test_shoal_vars(void **state)
{
    ports_t p = {free_port(), 0};
    run_case(3, setup_shoal_vars, &p, NULL);
}

/* (ii) torchrun, with the secret derived from the run id (SHOAL_AUTH=warn):
 * shoal must listen on MASTER_PORT+1, since torchrun's store holds
 * MASTER_PORT. */
static void setup_torchrun(int rank, int nranks, const ports_t *p)
{
    env_int("RANK", rank);
    env_int("WORLD_SIZE", nranks);
    env_int("LOCAL_RANK", rank);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    env_int("MASTER_PORT", p->master_port);
    setenv("TORCHELASTIC_RUN_ID", "test-run-1", 1);
    setenv("SHOAL_AUTH", "warn", 1);
}

static void test_torchrun(void **state)
{
    ports_t p = {0, 0};
    int held = hold_master_port(&p.master_port);
    run_case(3, setup_torchrun, &p, NULL);
    assert_untouched(held);
    close(held);
}

/* The port rule itself: torchrun ranks 0 and 2 meet rank 1, which was told
 * SHOAL_ADDR=127.0.0.1:MASTER_PORT+1 explicitly. They only meet if rank 0
 * listens exactly there. */
static void setup_torchrun_vs_addr(int rank, int nranks, const ports_t *p)
{
    if (rank == 1) {
        env_int("SHOAL_RANK", rank);
        env_int("SHOAL_SIZE", nranks);
        env_addr("SHOAL_ADDR", p->master_port + 1);
        /* The same job: the passphrase's salt holds its run id. */
        setenv("TORCHELASTIC_RUN_ID", "test-run-1", 1);
    } else {
        setup_torchrun(rank, nranks, p);
    }
    setenv("SHOAL_SECRET", "test port rule", 1);
}

static void test_torchrun_listens_on_master_port_plus_one(void **state)
{
    ports_t p = {0, 0};
    int held = hold_master_port(&p.master_port);
    run_case(3, setup_torchrun_vs_addr, &p, NULL);
    assert_untouched(held);
    close(held);
}

/* SHOAL_PORT overrides MASTER_PORT+1. */
static void setup_torchrun_shoal_port(int rank, int nranks, const ports_t *p)
{
    if (rank == 1) {
        env_int("SHOAL_RANK", rank);
        env_int("SHOAL_SIZE", nranks);
        env_addr("SHOAL_ADDR", p->port);
        setenv("TORCHELASTIC_RUN_ID", "test-run-1", 1);
    } else {
        setup_torchrun(rank, nranks, p);
        env_int("SHOAL_PORT", p->port);
    }
    setenv("SHOAL_SECRET", "test shoal port", 1);
}

static void test_torchrun_shoal_port(void **state)
{
    ports_t p = {0, 0};
    int held = hold_master_port(&p.master_port);
    p.port = free_port();
    run_case(3, setup_torchrun_shoal_port, &p, NULL);
    assert_untouched(held);
    close(held);
}

/* (iii) Open MPI without PMIx, address from SHOAL_ADDR, secret from the
 * job id (SHOAL_AUTH=off). */
static void setup_ompi(int rank, int nranks, const ports_t *p)
{
    env_int("OMPI_COMM_WORLD_RANK", rank);
    env_int("OMPI_COMM_WORLD_SIZE", nranks);
    env_int("OMPI_COMM_WORLD_LOCAL_RANK", rank);
    setenv("OMPI_MCA_ess_base_jobid", "12345", 1);
    env_addr("SHOAL_ADDR", p->port);
    setenv("SHOAL_AUTH", "off", 1);
}

static void test_ompi(void **state)
{
    ports_t p = {free_port(), 0};
    run_case(4, setup_ompi, &p, NULL);
}

/* A passphrase file of the given mode; its path in path (64 bytes). */
static int secret_file(char *path, const char *text, mode_t mode)
{
    strcpy(path, "/tmp/shoal-test-secret-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    int ok = write(fd, text, len) == (ssize_t)len && fchmod(fd, mode) == 0;
    close(fd);
    return ok ? 0 : -1;
}

static char slurm_secret_path[64];

/* (iv) Slurm with MASTER_ADDR; the port from SHOAL_PORT, the passphrase from
 * SHOAL_SECRET_FILE (mode 600, with a line ending). */
static void setup_slurm(int rank, int nranks, const ports_t *p)
{
    env_int("SLURM_PROCID", rank);
    env_int("SLURM_NTASKS", nranks);
    env_int("SLURM_LOCALID", rank);
    setenv("SLURM_JOB_ID", "777", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    env_int("SHOAL_PORT", p->port);
    setenv("SHOAL_SECRET_FILE", slurm_secret_path, 1);
}

static void test_slurm(void **state)
{
    ports_t p = {free_port(), 0};
    assert_int_equal(secret_file(slurm_secret_path, "slurm test passphrase\n", 0600), 0);
    run_case(2, setup_slurm, &p, NULL);
    unlink(slurm_secret_path);
}

/* PMIx variables without a PMIx server behind them: shoal falls back to the
 * launchers that follow. */
static void setup_stale_pmix(int rank, int nranks, const ports_t *p)
{
    setup_ompi(rank, nranks, p);
    setenv("PMIX_NAMESPACE", "shoal-test-no-such-namespace", 1);
    env_int("PMIX_RANK", rank);
    setenv("PMIX_SERVER_URI41", "shoal-test-ns.0;tcp4://127.0.0.1:1", 1);
}

static void test_stale_pmix_falls_back(void **state)
{
    ports_t p = {free_port(), 0};
    run_case(2, setup_stale_pmix, &p, NULL);
}

/* (vi) A process with another SHOAL_SECRET claims rank 1 while the real
 * ranks form: it is refused and they still form. */
static void setup_secret_right(int rank, int nranks, const ports_t *p)
{
    setup_shoal_vars(rank, nranks, p);
    setenv("SHOAL_SECRET", "the right secret", 1);
}

static void setup_secret_wrong(int rank, int nranks, const ports_t *p)
{
    setup_shoal_vars(1, nranks, p);
    setenv("SHOAL_SECRET", "a wrong secret", 1);
    setenv("SHOAL_TIMEOUT", "3s", 1);
    setenv("SHOAL_DEBUG", "none", 1);
}

static void test_wrong_secret_refused(void **state)
{
    ports_t p = {free_port(), 0};
    run_case(2, setup_secret_right, &p, setup_secret_wrong);
}

/* The same with derived secrets: another torchrun job on the same address
 * does not get in. */
static void setup_other_job(int rank, int nranks, const ports_t *p)
{
    setup_torchrun(1, nranks, p);
    setenv("TORCHELASTIC_RUN_ID", "another-run", 1);
    setenv("SHOAL_TIMEOUT", "3s", 1);
    setenv("SHOAL_DEBUG", "none", 1);
}

static void test_other_job_refused(void **state)
{
    ports_t p = {0, 0};
    int held = hold_master_port(&p.master_port);
    run_case(2, setup_torchrun, &p, setup_other_job);
    assert_untouched(held);
    close(held);
}

/* Bad environments, each checked in its own process: INVALID_ARG, comm
 * untouched, and the reason names the variables. */
typedef struct {
    const char *vars[8]; /* NAME=value pairs, NULL-terminated */
    const char *reason;  /* text the last error must contain */
} bad_env_t;

static const bad_env_t bad_envs[] = {
    {{"SHOAL_RANK=1", NULL}, "SHOAL_SIZE"},
    {{"SHOAL_SIZE=2", NULL}, "SHOAL_RANK"},
    {{"SHOAL_RANK=2", "SHOAL_SIZE=2", "SHOAL_ADDR=127.0.0.1:1", NULL}, "SHOAL_RANK=2"},
    {{"SHOAL_RANK=1", "SHOAL_SIZE=2", NULL}, "MASTER_ADDR"},
    {{"SHOAL_RANK=1", "SHOAL_SIZE=2", "SHOAL_ADDR=127.0.0.1:5000", "SHOAL_PORT=6000", NULL},
     "SHOAL_PORT=6000"},
    {{"SHOAL_RANK=1", "SHOAL_SIZE=2", "SHOAL_ADDR=127.0.0.1:0", NULL}, "port 0"},
    {{"RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=5000", NULL}, "WORLD_SIZE"},
    {{"RANK=1", "WORLD_SIZE=two", "MASTER_ADDR=127.0.0.1", NULL}, "WORLD_SIZE=\"two\""},
    {{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=http", NULL},
     "MASTER_PORT"},
    {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=5", "MASTER_ADDR=127.0.0.1", NULL}, "local rank"},
    {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", NULL}, "SHOAL_ADDR"},
    {{"SLURM_PROCID=0", "MASTER_ADDR=127.0.0.1", NULL}, "SLURM_NTASKS"},
    {{"SLURM_PROCID=-1", "SLURM_NTASKS=2", "MASTER_ADDR=127.0.0.1", NULL}, "SLURM_PROCID"},
};

static int bad_env_body(const bad_env_t *b)
{
    env_clear();
    /* A case wrongly accepted must not wait for peers for long. */
    setenv("SHOAL_TIMEOUT", "2s", 1);
    setenv("SHOAL_DEBUG", "none", 1);
    for (int i = 0; b->vars[i]; i++)
        RANK_CHECK(putenv((char *)b->vars[i]) == 0, fail, "putenv");
    shoal_config_reload();
    shoal_comm_t comm = (shoal_comm_t)&comm; /* sentinel: must stay */
    shoal_status_t s = shoal_comm_init_env(&comm);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "case %s: got %s", b->reason,
               shoal_status_string(s));
    RANK_CHECK(comm == (shoal_comm_t)&comm, fail, "comm written on failure");
    const char *why = shoal_comm_last_error(NULL);
    RANK_CHECK(strstr(why, b->reason) != NULL, fail, "reason \"%s\" lacks \"%s\"", why, b->reason);
    return 0;
fail:
    return 1;
}

static void test_bad_environments(void **state)
{
    for (size_t i = 0; i < sizeof(bad_envs) / sizeof(bad_envs[0]); i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            int rc = bad_env_body(&bad_envs[i]);
            fflush(NULL);
            _exit(rc ? 1 : 0);
        }
        assert_true(pid > 0);
        if (harness_wait(pid, WAIT_S) != 0)
            fail_msg("bad environment %zu (%s) not refused as expected", i, bad_envs[i].reason);
    }
}

/* (v) No launcher at all: the reason lists every launcher looked for. */
static int no_launcher_body(void)
{
    env_clear();
    setenv("SHOAL_DEBUG", "none", 1);
    shoal_config_reload();
    shoal_comm_t comm = NULL;
    RANK_CHECK(shoal_comm_init_env(&comm) == SHOAL_ERR_INVALID_ARG, fail, "not refused");
    RANK_CHECK(comm == NULL, fail, "comm written");
    const char *why = shoal_comm_last_error(NULL);
    static const char *const named[] = {"SHOAL_RANK", "PMIX_NAMESPACE", "WORLD_SIZE",
                                        "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        RANK_CHECK(strstr(why, named[i]) != NULL, fail, "\"%s\" does not name %s", why, named[i]);
    RANK_CHECK(shoal_comm_init_env(NULL) == SHOAL_ERR_INVALID_ARG, fail, "NULL comm_p accepted");
    return 0;
fail:
    return 1;
}

static void test_no_launcher(void **state)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int rc = no_launcher_body();
        fflush(NULL);
        _exit(rc ? 1 : 0);
    }
    assert_true(pid > 0);
    assert_int_equal(harness_wait(pid, WAIT_S), 0);
}

/* ---- where the secret comes from ------------------------------------------ */

/* Run body in a process of its own with a clean launcher environment. */
static void in_child(int (*body)(const void *), const void *arg, const char *what)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        env_clear();
        int rc = body(arg);
        fflush(NULL);
        _exit(rc ? 1 : 0);
    }
    assert_true(pid > 0);
    if (harness_wait(pid, WAIT_S) != 0)
        fail_msg("%s failed", what);
}

/* One rank alone: init succeeds as soon as its secret is settled, so a
 * launch that should be refused shows by succeeding. */
typedef struct {
    const char *vars[8];   /* NAME=value; "@ADDR" is SHOAL_ADDR=127.0.0.1:<free port> */
    shoal_status_t status; /* what init must return */
    const char *reason[3]; /* text the last error must contain */
} secret_case_t;

static int secret_case_body(const void *arg)
{
    const secret_case_t *c = arg;
    char addr[64];
    setenv("SHOAL_DEBUG", "none", 1);
    for (int i = 0; c->vars[i]; i++) {
        if (!strcmp(c->vars[i], "@ADDR")) {
            snprintf(addr, sizeof(addr), "SHOAL_ADDR=127.0.0.1:%d", free_port());
            RANK_CHECK(putenv(addr) == 0, fail, "putenv");
        } else {
            RANK_CHECK(putenv((char *)c->vars[i]) == 0, fail, "putenv");
        }
    }
    shoal_config_reload();
    shoal_comm_t comm = NULL;
    shoal_status_t s = shoal_comm_init_env(&comm);
    RANK_CHECK(s == c->status, fail, "%s...: got %s, not %s (%s)", c->vars[0],
               shoal_status_string(s), shoal_status_string(c->status),
               shoal_comm_last_error(NULL));
    if (s == SHOAL_OK)
        return shoal_comm_destroy(comm) != SHOAL_OK;
    const char *why = shoal_comm_last_error(NULL);
    for (int i = 0; i < 3 && c->reason[i]; i++)
        RANK_CHECK(strstr(why, c->reason[i]) != NULL, fail, "\"%s\" lacks \"%s\"", why,
                   c->reason[i]);
    return 0;
fail:
    return 1;
}

static char open_secret_path[64], group_secret_path[64], empty_secret_path[64],
    good_secret_path[64];
static char open_secret_var[96], group_secret_var[96], empty_secret_var[96],
    good_secret_var[96];

/* No passphrase and no PMIx: refused by default, with what to do and, for
 * torchrun, why its store is no channel; accepted only when SHOAL_AUTH
 * says so. A secret file others may read or write is refused. */
static void test_secret_sources(void **state)
{
    assert_int_equal(secret_file(open_secret_path, "open passphrase", 0644), 0);
    assert_int_equal(secret_file(group_secret_path, "group passphrase", 0620), 0);
    assert_int_equal(secret_file(empty_secret_path, "\n", 0600), 0);
    assert_int_equal(secret_file(good_secret_path, "good passphrase\n", 0400), 0);
    snprintf(open_secret_var, sizeof(open_secret_var), "SHOAL_SECRET_FILE=%s", open_secret_path);
    snprintf(group_secret_var, sizeof(group_secret_var), "SHOAL_SECRET_FILE=%s",
             group_secret_path);
    snprintf(empty_secret_var, sizeof(empty_secret_var), "SHOAL_SECRET_FILE=%s",
             empty_secret_path);
    snprintf(good_secret_var, sizeof(good_secret_var), "SHOAL_SECRET_FILE=%s", good_secret_path);
    const secret_case_t cases[] = {
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", NULL}, SHOAL_ERR_AUTH,
         {"SHOAL_SECRET_FILE", "SHOAL_AUTH=warn", "PMIx"}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", "SHOAL_AUTH=strict", NULL}, SHOAL_ERR_AUTH,
         {"SHOAL_SECRET_FILE"}},
        /* A value that does not parse leaves the default. */
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", "SHOAL_AUTH=maybe", NULL}, SHOAL_ERR_AUTH,
         {"SHOAL_SECRET_FILE"}},
        {{"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", "@ADDR", "TORCHELASTIC_RUN_ID=r1",
          NULL}, SHOAL_ERR_AUTH, {"torchrun offers no channel", "MASTER_ADDR accepts anyone"}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", open_secret_var, NULL}, SHOAL_ERR_AUTH,
         {"mode 0644", "chmod 600"}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", group_secret_var, "SHOAL_AUTH=off", NULL},
         SHOAL_ERR_AUTH, {"mode 0620", "chmod 600"}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", empty_secret_var, NULL},
         SHOAL_ERR_INVALID_ARG, {"is empty"}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", "SHOAL_SECRET_FILE=/nonexistent/shoal", NULL},
         SHOAL_ERR_INVALID_ARG, {"/nonexistent/shoal"}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", good_secret_var, "SHOAL_SECRET=x", NULL},
         SHOAL_ERR_INVALID_ARG, {"set one"}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", good_secret_var, NULL}, SHOAL_OK, {NULL}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", "SHOAL_SECRET=pass phrase", NULL}, SHOAL_OK,
         {NULL}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", "SHOAL_AUTH=warn", NULL}, SHOAL_OK, {NULL}},
        {{"SHOAL_RANK=0", "SHOAL_SIZE=1", "@ADDR", "SHOAL_AUTH=off", NULL}, SHOAL_OK, {NULL}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char what[64];
        snprintf(what, sizeof(what), "secret case %zu", i);
        in_child(secret_case_body, &cases[i], what);
    }
    unlink(open_secret_path);
    unlink(group_secret_path);
    unlink(empty_secret_path);
    unlink(good_secret_path);
}

/* SHOAL_AUTH=warn: one warning, at WARN level (logged by default), on
 * rank 0, naming the risk. */
static int warn_body(const void *arg)
{
    char log[64] = "/tmp/shoal-test-warn-XXXXXX";
    int fd = mkstemp(log);
    RANK_CHECK(fd >= 0, fail, "mkstemp");
    close(fd);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", free_port());
    setenv("SHOAL_RANK", "0", 1);
    setenv("SHOAL_SIZE", "1", 1);
    setenv("SHOAL_ADDR", addr, 1);
    setenv("SHOAL_AUTH", "warn", 1);
    setenv("SHOAL_DEBUG", "warn", 1);
    setenv("SHOAL_DEBUG_FILE", log, 1);
    shoal_config_reload();
    shoal_comm_t comm = NULL;
    shoal_status_t s = shoal_comm_init_env(&comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    shoal_comm_destroy(comm);
    char text[8192];
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    unlink(log);
    text[n] = '\0';
    const char *w = strstr(text, "shoal WARN ");
    RANK_CHECK(w && strstr(w, "SHOAL_AUTH=warn") && strstr(w, "can compute"), fail,
               "no warning in \"%s\"", text);
    RANK_CHECK(!strstr(strstr(w, "SHOAL_AUTH=warn") + 1, "SHOAL_AUTH=warn"), fail,
               "warned twice: \"%s\"", text);
    return 0;
fail:
    return 1;
}

static void test_warn_mode_warns(void **state)
{
    in_child(warn_body, NULL, "SHOAL_AUTH=warn");
}

/* The secret of an id made from a passphrase (NCCL_COMM_ID's path,
 * shoal_launch_id_for): scrypt of the passphrase with the salt the id
 * carries, which depends on the job, so that one captured handshake does not
 * open every job with that passphrase to a table computed in advance. */
static void id_secret_salt(const shoal_unique_id_t *id, uint8_t secret[32], uint8_t salt[16])
{
    memcpy(secret, id->bytes + 32, 32);
    memcpy(salt, id->bytes + 68, 16);
}

static int passphrase_body(const void *arg)
{
    static const char pass[] = "correct horse battery staple";
    shoal_unique_id_t a, b;
    uint8_t sa[32], salt_a[16], sb[32], salt_b[16], expect[32];
    setenv("SHOAL_SECRET", pass, 1);
    setenv("SHOAL_DEBUG", "none", 1);
    shoal_config_reload();
    RANK_CHECK(shoal_launch_id_for("127.0.0.1:5000", &a) == SHOAL_OK, fail, "id a");
    RANK_CHECK(shoal_launch_id_for("127.0.0.1:5001", &b) == SHOAL_OK, fail, "id b");
    id_secret_salt(&a, sa, salt_a);
    id_secret_salt(&b, sb, salt_b);
    RANK_CHECK(memcmp(salt_a, salt_b, 16) != 0, fail, "two jobs share a salt");
    RANK_CHECK(memcmp(sa, sb, 32) != 0, fail, "two jobs share a secret");
    unsigned len = 0;
    RANK_CHECK(EVP_Digest(pass, strlen(pass), expect, &len, EVP_sha256(), NULL) == 1, fail,
               "sha256");
    RANK_CHECK(memcmp(sa, expect, 32) != 0, fail, "the secret is the passphrase's bare hash");
    RANK_CHECK(EVP_PBE_scrypt(pass, strlen(pass), salt_a, 16, 1u << 15, 8, 1, 64u << 20, expect,
                              32) == 1, fail, "scrypt");
    RANK_CHECK(memcmp(sa, expect, 32) == 0, fail, "the secret is not scrypt(passphrase, salt)");
    /* The same job, the same id: every rank builds it alike. */
    RANK_CHECK(shoal_launch_id_for("127.0.0.1:5000", &b) == SHOAL_OK, fail, "id a again");
    RANK_CHECK(memcmp(a.bytes, b.bytes, sizeof(a.bytes)) == 0, fail, "ids differ");

    /* NCCL_COMM_ID follows SHOAL_AUTH too. */
    unsetenv("SHOAL_SECRET");
    shoal_config_reload();
    RANK_CHECK(shoal_launch_id_for("127.0.0.1:5000", &a) == SHOAL_ERR_AUTH, fail,
               "strict: an id without a passphrase");
    RANK_CHECK(strstr(shoal_comm_last_error(NULL), "NCCL_COMM_ID"), fail, "reason: %s",
               shoal_comm_last_error(NULL));
    setenv("SHOAL_AUTH", "off", 1);
    shoal_config_reload();
    RANK_CHECK(shoal_launch_id_for("127.0.0.1:5000", &a) == SHOAL_OK, fail, "off: no id");
    return 0;
fail:
    return 1;
}

static void test_passphrase_kdf(void **state)
{
    in_child(passphrase_body, NULL, "passphrase");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_launcher),
        cmocka_unit_test(test_bad_environments),
        cmocka_unit_test(test_shoal_vars),
        cmocka_unit_test(test_torchrun),
        cmocka_unit_test(test_torchrun_listens_on_master_port_plus_one),
        cmocka_unit_test(test_torchrun_shoal_port),
        cmocka_unit_test(test_ompi),
        cmocka_unit_test(test_slurm),
        cmocka_unit_test(test_stale_pmix_falls_back),
        cmocka_unit_test(test_wrong_secret_refused),
        cmocka_unit_test(test_other_job_refused),
        cmocka_unit_test(test_secret_sources),
        cmocka_unit_test(test_warn_mode_warns),
        cmocka_unit_test(test_passphrase_kdf),
    };
    return cmocka_run_group_tests_name("launch_env", tests, NULL, NULL);
}
