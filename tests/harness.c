#include "harness.h"

#include "algos/reduce.h"
#include "base/config.h"
#include "base/dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int harness_quick(void)
{
    const char *v = getenv("SHOAL_TEST_QUICK");
    return v && v[0] == '1';
}

void harness_setenv(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    shoal_config_reload();
}

void harness_require_root(const char *why)
{
    if (geteuid() == 0)
        return;
    printf("1..0 # SKIP not root: %s\n", why);
    fflush(stdout);
    exit(0);
}

int harness_enter_netns(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "/var/run/netns/%s", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    return rc;
}

void harness_use_transport(const char *transport, size_t chunk)
{
    char text[32];
    snprintf(text, sizeof(text), "%zu", chunk);
    harness_setenv("SHOAL_CHUNK_SIZE", text);
    harness_setenv("SHOAL_SHM_ENABLE", strcmp(transport, "shm") ? "n" : "y");
    harness_setenv("SHOAL_TIMEOUT", "20s");
}

int harness_check_untouched(const unsigned char *buf, size_t from, size_t to, unsigned char v,
                            int rank, const char *what)
{
    for (size_t i = from; i < to; i++)
        RANK_CHECK(buf[i] == v, fail, "rank %d: %s: byte %zu is %#x, want %#x", rank, what, i,
                   buf[i], v);
    return 0;
fail:
    return 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reap any of pids, polling with a short sleep: waitpid has no timeout. */
static int reap_any(const int *pids, int n, double deadline, int *status_p)
{
    for (;;) {
        for (int i = 0; i < n; i++) {
            if (pids[i] <= 0)
                continue;
            int st;
            pid_t r = waitpid(pids[i], &st, WNOHANG);
            if (r == pids[i]) {
                *status_p = st;
                return i;
            }
        }
        if (now_s() > deadline)
            return -1;
        usleep(2000);
    }
}

int harness_wait(int pid, int timeout_s)
{
    int st;
    int i = reap_any(&pid, 1, now_s() + timeout_s, &st);
    if (i < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int harness_run_ranks(int nranks, harness_rank_fn_t fn, void *arg, int timeout_s)
{
    return harness_run_ranks_victim(nranks, fn, arg, timeout_s, -1);
}

int harness_run_ranks_victim(int nranks, harness_rank_fn_t fn, void *arg, int timeout_s,
                             int victim)
{
    shoal_unique_id_t id;
    shoal_status_t s = shoal_get_unique_id(&id);
    if (s != SHOAL_OK) {
        fprintf(stderr, "# shoal_get_unique_id: %s\n", shoal_status_string(s));
        return -1;
    }
    int pids[64];
    if (nranks > 64)
        return -1;
    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = fn(r, nranks, &id, arg);
            fflush(NULL);
            _exit(rc ? 1 : 0);
        }
    }
    int failed = 0;
    double deadline = now_s() + timeout_s;
    for (int left = nranks; left > 0; left--) {
        int st;
        int i = reap_any(pids, nranks, deadline, &st);
        if (i < 0) {
            for (int r = 0; r < nranks; r++) {
                if (pids[r] > 0) {
                    fprintf(stderr, "# rank %d/%d still running after %d s: killed\n",
                            r, nranks, timeout_s);
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], NULL, 0);
                }
            }
            return -1;
        }
        if (i == victim && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
            pids[i] = 0;
            continue;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            if (WIFSIGNALED(st))
                fprintf(stderr, "# rank %d/%d died of signal %d\n", i, nranks, WTERMSIG(st));
            else
                fprintf(stderr, "# rank %d/%d exited %d\n", i, nranks, WEXITSTATUS(st));
            failed = 1;
        }
        pids[i] = 0;
    }
    return failed ? -1 : 0;
}

void *harness_alloc_guarded(size_t bytes)
{
    unsigned char *p = malloc(bytes + HARNESS_GUARD);
    assert_non_null(p);
    memset(p, HARNESS_GUARD_BYTE, bytes + HARNESS_GUARD);
    return p;
}

void harness_assert_guard(const void *buf, size_t bytes, const char *what)
{
    const unsigned char *p = (const unsigned char *)buf + bytes;
    for (size_t i = 0; i < HARNESS_GUARD; i++)
        if (p[i] != HARNESS_GUARD_BYTE)
            fail_msg("%s: wrote past the end (byte %zu)", what, i);
}

int harness_same_bytes(shoal_comm_t comm, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t h = 1469598103934665603ull, mx, mn;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    if (shoal_allreduce(&h, &mx, 1, SHOAL_UINT64, SHOAL_MAX, comm) != SHOAL_OK ||
        shoal_allreduce(&h, &mn, 1, SHOAL_UINT64, SHOAL_MIN, comm) != SHOAL_OK)
        return 0;
    return mx == mn && mx == h;
}

uint32_t harness_mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* A value whose sums, products, minima and maxima over up to 8 ranks are
 * exact in dtype. */
static double exact_value(int rank, size_t i, shoal_dtype_t dt, shoal_op_t op)
{
    uint32_t h = harness_mix((uint32_t)rank * 2654435761u + (uint32_t)i * 40503u + (uint32_t)op);
    if (op == SHOAL_PROD && dt >= SHOAL_FLOAT16) { /* every float type */
        /* Powers of two within 2^-8..2^8: exact even in fp8. */
        static const double f[] = {1, -1, 2, 0.5, 1, -2, -0.5, 1};
        return f[h % 8];
    }
    if (dt == SHOAL_FP8_E5M2)
        return (double)(int)(h % 3) - 1;
    if (dt == SHOAL_UINT8 || dt == SHOAL_UINT32 || dt == SHOAL_UINT64)
        return (double)(h % 5);
    return (double)(int)(h % 5) - 2;
}

void harness_fill_exact(void *buf, size_t count, int rank, shoal_dtype_t dt, shoal_op_t op)
{
    for (size_t i = 0; i < count; i++)
        shoal_dtype_set_f64(buf, i, dt, exact_value(rank, i, dt, op));
}

/* Expected result: fold every rank's input with the scalar reference. */
void harness_expected(void *out, void *tmp, size_t count, int nranks, shoal_dtype_t dt,
                     shoal_op_t op)
{
    harness_fill_exact(out, count, 0, dt, op);
    for (int r = 1; r < nranks; r++) {
        harness_fill_exact(tmp, count, r, dt, op);
        shoal_reduce_ref(out, out, tmp, count, dt, op);
    }
    if (op == SHOAL_AVG)
        shoal_avg_finish_ref(out, out, count, dt, nranks);
}

