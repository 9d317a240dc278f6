/* Which transport joins two hosts (core/wireup.c, transport/ib*.c), two
 * ranks as two hosts of one machine (harness_split_hosts):
 * - without rdma-core (SHOAL_TEST_IB_LIB names a library that is not
 *   there) ib says why at info level, the ranks meet over tcp and the
 *   class between hosts is tcp;
 * - SHOAL_IB_ENABLE=n: tcp, whatever ports there are;
 * - no ib and SHOAL_TCP_ENABLE=n: init fails on every rank, its error
 *   naming the peer no transport reaches;
 * - inside the RDMA guest (SHOAL_TEST_RXE=1), SHOAL_TCP_ENABLE=n: ib
 *   alone joins the hosts, the class between them is rdma, and every rank
 *   knows each rank's device (rxe0:1, rxe1:1). Elsewhere, with no RDMA
 *   port, the same settings fail init as above;
 * - SHOAL_IB_QPS_PER_CONN=3: an all-reduce of many pieces right over 3
 *   queue pairs per peer (in the guest; over tcp elsewhere);
 * - in the guest, rxe1's port taken down while rank 1 waits with nothing
 *   in flight: the device's event ends its wait with the peer error. */
#include "harness.h"

#include "base/clock.h"
#include "core/comm.h"
#include "topo/links.h"
#include "transport/ib_priv.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COUNT 10001
#define COUNT_QPS 300001 /* 19 pieces of 64 KiB: every queue pair carries several */

typedef enum {
    EXPECT_TCP,     /* init works; the hosts meet over tcp */
    EXPECT_IB,      /* init works; the hosts meet over ib */
    EXPECT_NO_INIT, /* init fails: nothing joins the hosts */
} expect_t;

typedef struct {
    expect_t expect;
    const char *log_has; /* in the rank's log (stderr), when not NULL */
    int qps;             /* queue pairs per ib peer to check (0: any) */
    size_t count;        /* floats of the all-reduce (0: COUNT) */
} sel_case_t;

static int rxe_run(void)
{
    const char *v = getenv("SHOAL_TEST_RXE");
    return v && !strcmp(v, "1");
}

static char log_dir[] = "/tmp/shoal_ib_select.XXXXXX";

static void log_path(int rank, char *path, size_t cap)
{
    snprintf(path, cap, "%s/rank%d.log", log_dir, rank);
}

/* The rank's log, whole, into a malloc'd string. */
static char *log_read(int rank)
{
    char path[128];
    log_path(rank, path, sizeof(path));
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *text = calloc(1, 1 << 20);
    if (text)
        fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    return text;
}

/* A rank's start: its host, and its log (stderr) into its file. */
static int rank_start(int rank, int nranks)
{
    harness_split_hosts(rank, nranks, 2);
    char path[128];
    log_path(rank, path, sizeof(path));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) != 2)
        return -1;
    close(fd);
    return 0;
}

static int check_allreduce(shoal_comm_t comm, int rank, int nranks, size_t count)
{
    float *buf = malloc(count * sizeof(float));
    RANK_CHECK(buf, fail, "out of memory");
    for (size_t i = 0; i < count; i++)
        buf[i] = (float)(rank + 1) * (float)(i % 7);
    shoal_status_t s = shoal_allreduce(buf, buf, count, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, fail_free, "all-reduce: %s", shoal_status_string(s));
    float sum = (float)(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < count; i++)
        RANK_CHECK(buf[i] == sum * (float)(i % 7), fail_free, "element %zu: %g", i, buf[i]);
    free(buf);
    return 0;
fail_free:
    free(buf);
fail:
    return 1;
}

/* The transport of every peer of the other host, and what init settled. */
static int check_joined(shoal_comm_t comm, int rank, expect_t expect, int qps)
{
    const char *want = expect == EXPECT_IB ? "ib" : "tcp";
    for (int p = 0; p < comm->team.nranks; p++) {
        if (comm->host_of[p] == comm->host_of[rank])
            continue;
        const char *name = shoal_comm_ep(comm, p)->ops->name;
        RANK_CHECK(!strcmp(name, want), fail, "rank %d reaches rank %d over %s, want %s", rank,
                   p, name, want);
#if SHOAL_HAVE_IBVERBS
        const shoal_ib_ep_t *ep = (const shoal_ib_ep_t *)shoal_comm_ep(comm, p);
        RANK_CHECK(expect != EXPECT_IB || !qps || ep->nqps == qps, fail,
                   "rank %d has %d queue pairs to rank %d, want %d", rank, ep->nqps, p, qps);
#endif
    }
    shoal_link_class_t inter = comm->team.cost.links.inter;
    RANK_CHECK(inter == (expect == EXPECT_IB ? SHOAL_LINK_RDMA : SHOAL_LINK_TCP), fail,
               "the class between hosts is %s", shoal_link_class_name(inter));
    RANK_CHECK(comm->rdma_devs, fail, "no record of the ranks' devices");
    for (int r = 0; r < comm->team.nranks; r++) {
        char dev[16] = "";
        if (expect == EXPECT_IB)
            snprintf(dev, sizeof(dev), "rxe%d:1", comm->host_of[r]);
        RANK_CHECK(!strcmp(comm->rdma_devs[r], dev), fail, "rank %d's device is \"%s\", want "
                   "\"%s\"", r, comm->rdma_devs[r], dev);
    }
    return 0;
fail:
    return 1;
}

static int sel_rank(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const sel_case_t *c = arg;
    RANK_CHECK(rank_start(rank, nranks) == 0, fail, "rank %d: no log", rank);
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    if (c->expect == EXPECT_NO_INIT) {
        RANK_CHECK(s != SHOAL_OK, fail, "rank %d: init worked with nothing between the hosts",
                   rank);
        const char *why = shoal_comm_last_error(NULL);
        RANK_CHECK(strstr(why, "no transport reaches rank"), fail, "rank %d: init failed: %s",
                   rank, why);
        return 0;
    }
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: init: %s (%s)", rank, shoal_status_string(s),
               shoal_comm_last_error(NULL));
    int rc = check_joined(comm, rank, c->expect, c->qps) ||
             check_allreduce(comm, rank, nranks, c->count ? c->count : COUNT);
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return rc;
fail:
    return 1;
}

static void run_sel(const sel_case_t *c, const char *what)
{
    printf("# %s\n", what);
    fflush(stdout);
    harness_use_transport("shm", 1 << 16);
    int rc = harness_run_ranks(2, sel_rank, (void *)c, 60);
    int lacks = 0;
    for (int r = 0; r < 2; r++) {
        char *text = log_read(r);
        assert_non_null(text);
        if (rc != 0 || (c->log_has && !strstr(text, c->log_has))) {
            printf("# rank %d's log%s%s%s:\n", r, c->log_has ? " (looking for \"" : "",
                   c->log_has ? c->log_has : "", c->log_has ? "\")" : "");
            for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
                printf("#   %s\n", line);
            lacks = 1;
        }
        free(text);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(lacks, 0);
}

static void test_no_rdma_core(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TEST_IB_LIB", "libshoal-no-such-verbs.so.1");
    harness_setenv("SHOAL_DEBUG", "info");
    harness_setenv("SHOAL_DEBUG_SUBSYS", "IBV");
#if SHOAL_HAVE_IBVERBS
    const char *why = "ib unavailable: cannot load libshoal-no-such-verbs.so.1";
#else
    const char *why = "ib unavailable: built without rdma-core's headers";
#endif
    const sel_case_t c = {EXPECT_TCP, why, 0, 0};
    run_sel(&c, "no libibverbs: ib says why, tcp joins the hosts");
    harness_setenv("SHOAL_TCP_ENABLE", "n");
    const sel_case_t none = {EXPECT_NO_INIT, NULL, 0, 0};
    run_sel(&none, "no libibverbs and SHOAL_TCP_ENABLE=n: init fails naming the peer");
}

static void test_ib_disabled(void **state)
{
    (void)state;
    harness_setenv("SHOAL_IB_ENABLE", "n");
    const sel_case_t c = {EXPECT_TCP, NULL, 0, 0};
    run_sel(&c, "SHOAL_IB_ENABLE=n: tcp joins the hosts");
}

static void test_tcp_disabled(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TCP_ENABLE", "n");
    const sel_case_t ib = {EXPECT_IB, NULL, 0, 0};
    const sel_case_t none = {EXPECT_NO_INIT, NULL, 0, 0};
    run_sel(rxe_run() ? &ib : &none, rxe_run() ? "SHOAL_TCP_ENABLE=n: ib alone joins the hosts"
                                               : "SHOAL_TCP_ENABLE=n, no RDMA port: init fails");
}

/* Messages take the queue pairs in turn: an all-reduce of many pieces
 * over 3 of them per peer, each with 2 of SHOAL_IB_NSLOTS=6. */
static void test_queue_pairs(void **state)
{
    (void)state;
    harness_setenv("SHOAL_IB_QPS_PER_CONN", "3");
    harness_setenv("SHOAL_IB_NSLOTS", "6");
    const sel_case_t c = {rxe_run() ? EXPECT_IB : EXPECT_TCP, NULL, 3, COUNT_QPS};
    run_sel(&c, "SHOAL_IB_QPS_PER_CONN=3: an all-reduce of 19 pieces");
}

/* ---- a port that goes down while a rank waits ---------------------------
 * Rank 1 waits in an all-reduce for rank 0, which holds back; nothing of
 * rank 1's is in flight, so only the device's event can tell it that its
 * port went down (vethB, under rxe1, taken down by this process): it must
 * end with the peer error naming the port, within its deadline. Rank 0,
 * let go once the port is back, gets the peer error too. Inside the RDMA
 * guest only. */
static int port_pipe[2];
static int port_done[2];

static int port_rank(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    RANK_CHECK(rank_start(rank, nranks) == 0, fail, "rank %d: no log", rank);
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    float v[64] = {0};
    char byte = 1;
    if (rank == 0) {
        RANK_CHECK(write(port_done[1], &byte, 1) == 1 && read(port_pipe[0], &byte, 1) == 1,
                   fail, "pipe");
    } else {
        RANK_CHECK(write(port_done[1], &byte, 1) == 1, fail, "pipe");
    }
    uint64_t t0 = shoal_now_ns();
    s = shoal_allreduce(v, v, 64, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_ERR_PEER, fail, "rank %d: the all-reduce ended with %s", rank,
               shoal_status_string(s));
    fprintf(stderr, "# rank %d: peer error after %.2f s\n", rank,
            (double)(shoal_now_ns() - t0) * 1e-9);
    shoal_comm_abort(comm);
    return 0;
fail:
    return 1;
}

static int sysfs_active(const char *dev)
{
    char path[128], text[64] = "";
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/state", dev);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = fgets(text, sizeof(text), f) && strstr(text, "ACTIVE");
    fclose(f);
    return ok;
}

static void test_port_down_while_waiting(void **state)
{
    (void)state;
    if (!rxe_run())
        return; /* needs the RDMA guest's rxe devices */
    harness_setenv("SHOAL_TIMEOUT", "30s");
    assert_int_equal(pipe(port_pipe), 0);
    assert_int_equal(pipe(port_done), 0);
    harness_use_transport("shm", 1 << 16);
    harness_setenv("SHOAL_TIMEOUT", "30s");
    fflush(NULL);
    int pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(harness_run_ranks(2, port_rank, NULL, 60) == 0 ? 0 : 1);
    char byte;
    assert_int_equal(read(port_done[0], &byte, 1), 1);
    assert_int_equal(read(port_done[0], &byte, 1), 1);
    usleep(500000); /* rank 1 is inside its all-reduce by now */
    assert_int_equal(system("ip link set vethB down"), 0);
    usleep(3000000);
    assert_int_equal(system("ip link set vethB up"), 0);
    for (int i = 0; i < 100 && !(sysfs_active("rxe0") && sysfs_active("rxe1")); i++)
        usleep(100000);
    byte = 1;
    assert_int_equal(write(port_pipe[1], &byte, 1), 1);
    int st = harness_wait(pid, 60);
    int lacks = 0;
    for (int r = 0; r < 2; r++) {
        char *text = log_read(r);
        assert_non_null(text);
        int want = r == 0 || strstr(text, "rank 1: connection to rank 0 lost: rxe1 port 1: "
                                          "port error");
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            if (!want || st != 0 || strstr(line, "lost") || strstr(line, "peer error after"))
                printf("#   rank %d: %s\n", r, line);
        }
        lacks |= !want;
        free(text);
    }
    close(port_pipe[0]);
    close(port_pipe[1]);
    close(port_done[0]);
    close(port_done[1]);
    assert_int_equal(st, 0);
    assert_int_equal(lacks, 0);
    assert_true(sysfs_active("rxe1"));
}

/* Every case starts from the same settings, whatever the last one left. */
static int reset(void **state)
{
    (void)state;
    static const char *const names[] = {"SHOAL_TCP_ENABLE",    "SHOAL_IB_ENABLE",
                                        "SHOAL_TEST_IB_LIB",   "SHOAL_DEBUG",
                                        "SHOAL_DEBUG_SUBSYS",  "SHOAL_IB_QPS_PER_CONN",
                                        "SHOAL_IB_NSLOTS",     "SHOAL_TIMEOUT"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        harness_setenv(names[i], NULL);
    return 0;
}

int main(void)
{
    if (!mkdtemp(log_dir)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_no_rdma_core, reset),
        cmocka_unit_test_teardown(test_ib_disabled, reset),
        cmocka_unit_test_teardown(test_tcp_disabled, reset),
        cmocka_unit_test_teardown(test_queue_pairs, reset),
        cmocka_unit_test_teardown(test_port_down_while_waiting, reset),
    };
    int rc = cmocka_run_group_tests_name("ib_select", tests, NULL, NULL);
    for (int r = 0; r < 2; r++) {
        char path[128];
        log_path(r, path, sizeof(path));
        unlink(path);
    }
    rmdir(log_dir);
    return rc;
}
