/* Two hosts on one machine: network namespaces joined by a veth pair, two
 * ranks in each. Ranks of one namespace share memory, ranks of the other
 * are reached over tcp; all-reduce results must be right either way. */
#include "harness.h"

#include "base/clock.h"
#include "core/comm.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS_A "shoal_test_a"
#define NS_B "shoal_test_b"
#define ADDR_A "10.231.77.1"
#define ADDR_B "10.231.77.2"

static int sh(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "# command failed (%d): %s\n", rc, cmd);
    return rc;
}

static void netns_remove(void)
{
    if (system("ip netns del " NS_A " 2>/dev/null; ip netns del " NS_B " 2>/dev/null")) {
        /* Nothing to remove is fine. */
    }
}

static int netns_create(void)
{
    netns_remove();
    return sh("ip netns add " NS_A) || sh("ip netns add " NS_B) ||
           sh("ip link add shoal_va type veth peer name shoal_vb") ||
           sh("ip link set shoal_va netns " NS_A) || sh("ip link set shoal_vb netns " NS_B) ||
           sh("ip -n " NS_A " addr add " ADDR_A "/24 dev shoal_va") ||
           sh("ip -n " NS_B " addr add " ADDR_B "/24 dev shoal_vb") ||
           sh("ip -n " NS_A " link set shoal_va up") || sh("ip -n " NS_B " link set shoal_vb up") ||
           sh("ip -n " NS_A " link set lo up") || sh("ip -n " NS_B " link set lo up");
}

/* Both namespaces, fresh (as root, which main made sure of). */
static void netns_setup(void)
{
    assert_int_equal(netns_create(), 0);
}

/* Rank body: namespace A holds ranks 0 and 1, B holds 2 and 3. */
static int two_host_rank(int rank, int nranks, int id_fd_in, int id_fd_out)
{
    const char *ns = rank < 2 ? NS_A : NS_B;
    RANK_CHECK(harness_enter_netns(ns) == 0, fail, "cannot enter %s", ns);
    harness_setenv("SHOAL_HOST_ID", ns);
    shoal_unique_id_t id;
    if (rank == 0) {
        RANK_CHECK(shoal_get_unique_id(&id) == SHOAL_OK, fail, "unique id");
        RANK_CHECK(write(id_fd_out, &id, sizeof(id)) == (ssize_t)sizeof(id), fail, "send id");
    } else {
        RANK_CHECK(read(id_fd_in, &id, sizeof(id)) == (ssize_t)sizeof(id), fail, "receive id");
    }
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, &id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    RANK_CHECK(comm->team.nhosts == 2, fail, "%d hosts seen, want 2", comm->team.nhosts);
    for (int peer = 0; peer < nranks; peer++) {
        if (peer == rank)
            continue;
        const char *want = (peer < 2) == (rank < 2) ? "shm" : "tcp";
        RANK_CHECK(!strcmp(comm->team.eps[peer]->ops->name, want), fail,
                   "rank %d -> %d over %s, want %s", rank, peer, comm->team.eps[peer]->ops->name, want);
    }
    const size_t counts[] = {1, 1001, 3 << 20};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t n = counts[c];
        double *x = malloc(n * sizeof(double));
        int64_t *y = malloc(n * sizeof(int64_t));
        RANK_CHECK(x && y, fail, "out of memory");
        for (size_t i = 0; i < n; i++) {
            x[i] = (double)((i * 13 + (size_t)rank * 5) % 11);
            y[i] = (int64_t)(i % 97) - rank;
        }
        RANK_CHECK(shoal_allreduce(x, x, n, SHOAL_FLOAT64, SHOAL_SUM, comm) == SHOAL_OK, fail,
                   "sum");
        RANK_CHECK(shoal_allreduce(y, y, n, SHOAL_INT64, SHOAL_MIN, comm) == SHOAL_OK, fail, "min");
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < nranks; r++)
                want += (double)((i * 13 + (size_t)r * 5) % 11);
            RANK_CHECK(x[i] == want, fail, "count %zu: sum[%zu] %g want %g", n, i, x[i], want);
            RANK_CHECK(y[i] == (int64_t)(i % 97) - (nranks - 1), fail, "count %zu: min[%zu]", n, i);
        }
        free(x);
        free(y);
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_two_hosts(void **state)
{
    (void)state;
    netns_setup();
    enum { N = 4 };
    int fds[N][2]; /* rank 0 hands the id to rank r through fds[r] */
    for (int r = 0; r < N; r++)
        assert_int_equal(pipe(fds[r]), 0);
    int pids[N];
    fflush(NULL);
    for (int r = 0; r < N; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc;
            if (r == 0) {
                /* Rank 0 broadcasts the id: write it once per peer. */
                int out[2];
                if (pipe(out) != 0)
                    _exit(1);
                rc = 0;
                pid_t fwd = fork();
                if (fwd == 0) {
                    shoal_unique_id_t id;
                    if (read(out[0], &id, sizeof(id)) != (ssize_t)sizeof(id))
                        _exit(1);
                    for (int p = 1; p < N; p++)
                        if (write(fds[p][1], &id, sizeof(id)) != (ssize_t)sizeof(id))
                            _exit(1);
                    _exit(0);
                }
                rc = two_host_rank(0, N, -1, out[1]);
                rc |= harness_wait(fwd, 10) != 0;
            } else {
                rc = two_host_rank(r, N, fds[r][0], -1);
            }
            fflush(NULL);
            _exit(rc ? 1 : 0);
        }
    }
    int failed = 0;
    for (int r = 0; r < N; r++) {
        int rc = harness_wait(pids[r], 120);
        if (rc != 0) {
            fprintf(stderr, "# rank %d failed (%d)\n", r, rc);
            failed = 1;
        }
    }
    netns_remove();
    assert_int_equal(failed, 0);
}

/* A host that vanishes: rank 0 in A, rank 1 in B. After a working
 * all-reduce the parent takes the link down (packets vanish, so no
 * connection sees an end); both ranks then block in an all-reduce and must
 * get SHOAL_ERR_PEER naming the other, from the bootstrap connection's
 * keepalive probes, long before SHOAL_TIMEOUT. */
static int vanish_rank(int rank, int id_fd_in, int id_fd_out, int ready_fd, int cut_fd)
{
    const char *ns = rank == 0 ? NS_A : NS_B;
    RANK_CHECK(harness_enter_netns(ns) == 0, fail, "cannot enter %s", ns);
    harness_setenv("SHOAL_HOST_ID", ns);
    harness_setenv("SHOAL_TIMEOUT", "120s");
    shoal_unique_id_t id;
    if (rank == 0) {
        RANK_CHECK(shoal_get_unique_id(&id) == SHOAL_OK, fail, "unique id");
        RANK_CHECK(write(id_fd_out, &id, sizeof(id)) == (ssize_t)sizeof(id), fail, "send id");
    } else {
        RANK_CHECK(read(id_fd_in, &id, sizeof(id)) == (ssize_t)sizeof(id), fail, "receive id");
    }
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(2, &id, rank, &comm) == SHOAL_OK, fail, "init");
    double x = 1;
    RANK_CHECK(shoal_allreduce(&x, &x, 1, SHOAL_FLOAT64, SHOAL_SUM, comm) == SHOAL_OK && x == 2,
               fail, "all-reduce before the cut");
    char b = 1;
    RANK_CHECK(write(ready_fd, &b, 1) == 1 && read(cut_fd, &b, 1) == 1, fail, "handshake");
    uint64_t t0 = shoal_now_ns();
    shoal_status_t s = shoal_allreduce(&x, &x, 1, SHOAL_FLOAT64, SHOAL_SUM, comm);
    double waited = (double)(shoal_now_ns() - t0) / 1e9;
    char want[16];
    snprintf(want, sizeof(want), "rank %d", 1 - rank);
    RANK_CHECK(s == SHOAL_ERR_PEER && strstr(shoal_comm_last_error(comm), want), fail,
               "after the cut: %s (%s)", shoal_status_string(s), shoal_comm_last_error(comm));
    printf("# rank %d: the vanished host noticed after %.1f s (SHOAL_HEARTBEAT 1s)\n", rank,
           waited);
    fflush(stdout);
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
    return 0;
fail:
    return 1;
}

static void test_host_vanishes(void **state)
{
    (void)state;
    netns_setup();
    int id[2], ready[2], cut[2][2];
    assert_int_equal(pipe(id) | pipe(ready) | pipe(cut[0]) | pipe(cut[1]), 0);
    int pids[2];
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = vanish_rank(r, id[0], id[1], ready[1], cut[r][0]);
            fflush(NULL);
            _exit(rc ? 1 : 0);
        }
    }
    char b;
    int ok = read(ready[0], &b, 1) == 1 && read(ready[0], &b, 1) == 1;
    ok = ok && sh("ip -n " NS_A " link set shoal_va down") == 0 &&
         sh("ip -n " NS_B " link set shoal_vb down") == 0;
    for (int r = 0; r < 2; r++)
        ok = ok && write(cut[r][1], &b, 1) == 1;
    int failed = !ok;
    for (int r = 0; r < 2; r++) {
        int rc = harness_wait(pids[r], 60);
        if (rc != 0) {
            fprintf(stderr, "# rank %d failed (%d)\n", r, rc);
            failed = 1;
        }
    }
    netns_remove();
    assert_int_equal(failed, 0);
}

int main(void)
{
    harness_require_root("network namespaces need CAP_SYS_ADMIN");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_hosts),
        cmocka_unit_test(test_host_vanishes),
    };
    return cmocka_run_group_tests_name("two_hosts", tests, NULL, NULL);
}
