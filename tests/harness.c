#include "harness.h"

#include "algos/reduce.h"
#include "base/auth.h"
#include "base/sock.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "base/config.h"
#include "base/dtype.h"
#include "topo/cluster.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* SHOAL_TEST_ONLY=PATTERN runs only the tests whose names match (cmocka's
 * filter: '*' and '?' wildcards), to chase one test in a loop. */
__attribute__((constructor)) static void harness_filter(void)
{
    const char *only = getenv("SHOAL_TEST_ONLY");
    if (only && only[0])
        cmocka_set_test_filter(only);
}

int harness_quick(void)
{
    const char *v = getenv("SHOAL_TEST_QUICK");
    return v && v[0] == '1';
}

#if defined(__SANITIZE_THREAD__)
#define HARNESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HARNESS_TSAN 1
#endif
#endif

int harness_ranks_wanted(int nranks)
{
#ifdef HARNESS_TSAN
    /* TSan follows the threads of each rank's process, which 2 and 3
     * ranks run as any count does; 8 instrumented ranks take minutes. */
    return nranks == 2 || nranks == 3;
#else
    return !harness_quick() || nranks == 1 || nranks == 2 || nranks == 3 || nranks == 5 ||
           nranks == 8;
#endif
}

int harness_dtypes(shoal_dtype_t *dts)
{
    static const shoal_dtype_t quick[] = {SHOAL_INT8, SHOAL_FLOAT16, SHOAL_FLOAT32,
                                          SHOAL_FLOAT64};
    int n = 0;
    if (harness_quick()) {
        for (; n < (int)(sizeof(quick) / sizeof(quick[0])); n++)
            dts[n] = quick[n];
        return n;
    }
    for (; n < SHOAL_DTYPE_COUNT; n++)
        dts[n] = (shoal_dtype_t)n;
    return n;
}

void harness_setenv(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    shoal_config_reload();
}

int harness_split_hosts(int rank, int nranks, int nhosts)
{
    int h = (int)((long)rank * nhosts / nranks);
    char text[32];
    snprintf(text, sizeof(text), "ibhost%d", h);
    harness_setenv("SHOAL_HOST_ID", text);
    const char *rxe = getenv("SHOAL_TEST_RXE");
    if (rxe && !strcmp(rxe, "1")) {
        snprintf(text, sizeof(text), "=rxe%d", h);
        harness_setenv("SHOAL_IB_HCA", text);
    }
    return h;
}

void harness_plain_only(const char *what)
{
    if (!harness_quick())
        return;
    printf("1..0 # SKIP %s runs in the plain variant only (SHOAL_TEST_QUICK=1)\n", what);
    fflush(stdout);
    exit(0);
}

int harness_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
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
    /* The host's topology, loaded here once (the library keeps it per
     * process), comes with every rank's fork: hwloc takes tens of ms to
     * read this machine, which every rank of every run paid again. Where
     * the settings name another topology the ranks load that one: loaded
     * here, it would replace the host's, and hwloc would unload its
     * plugins with it, whose allocations LeakSanitizer then reports at
     * this process's exit. */
    const shoal_topo_config_t *topo = &shoal_config_get()->topo;
    if (!topo->file[0] && !topo->synthetic[0] && !topo->cpus[0])
        shoal_place_cpus();
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
    /* A logical op gives 1 or 0, on one rank too. */
    if (op >= SHOAL_LAND && op <= SHOAL_LXOR)
        shoal_reduce_ref(out, out, out, count, dt, SHOAL_LOR);
}


/* ---- relay ------------------------------------------------------------- */

struct harness_relay {
    pid_t pid;
    struct harness_relay_shared {
        volatile size_t len;
        volatile int flipped;
        unsigned char log[HARNESS_RELAY_LOG];
    } *shared;
};

static int relay_socket(int port, int do_listen, int *port_p)
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
    int rc = do_listen ? bind(fd, (struct sockaddr *)&sin, sizeof(sin)) || listen(fd, 4) ||
                             getsockname(fd, (struct sockaddr *)&sin, &len)
                       : connect(fd, (struct sockaddr *)&sin, sizeof(sin));
    if (rc != 0) {
        close(fd);
        return -1;
    }
    if (port_p)
        *port_p = ntohs(sin.sin_port);
    return fd;
}

/* The relay's process: one connection, both ways, until either side ends. */
static void relay_run(int lfd, int target_port, long flip_at, struct harness_relay_shared *sh)
{
    int a = accept(lfd, NULL, NULL);
    int b = a >= 0 ? relay_socket(target_port, 0, NULL) : -1;
    close(lfd);
    if (b < 0)
        _exit(1);
    long from_a = 0;
    struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
    for (;;) {
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            unsigned char buf[4096];
            ssize_t n = recv(p[i].fd, buf, sizeof(buf), 0);
            if (n <= 0)
                _exit(0);
            if (i == 0) {
                if (flip_at >= from_a && flip_at < from_a + n) {
                    buf[flip_at - from_a] ^= 1;
                    sh->flipped = 1;
                }
                from_a += n;
            }
            size_t room = HARNESS_RELAY_LOG - sh->len;
            size_t keep = (size_t)n < room ? (size_t)n : room;
            memcpy(sh->log + sh->len, buf, keep);
            sh->len += keep;
            for (ssize_t off = 0; off < n;) {
                ssize_t w = send(p[1 - i].fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
                if (w <= 0)
                    _exit(0);
                off += w;
            }
        }
    }
    _exit(0);
}

int harness_relay_start(int target_port, long flip_at, harness_relay_t **relay_p, int *port_p)
{
    harness_relay_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -1;
    r->shared = mmap(NULL, sizeof(*r->shared), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int lfd = r->shared != MAP_FAILED ? relay_socket(0, 1, port_p) : -1;
    if (lfd < 0) {
        if (r->shared != MAP_FAILED)
            munmap(r->shared, sizeof(*r->shared));
        free(r);
        return -1;
    }
    fflush(NULL);
    r->pid = fork();
    if (r->pid == 0)
        relay_run(lfd, target_port, flip_at, r->shared);
    close(lfd);
    *relay_p = r;
    return r->pid > 0 ? 0 : -1;
}

int harness_relay_id(long flip_at, harness_relay_t **relay_p, shoal_unique_id_t *id)
{
    shoal_sockaddr_t addr, via;
    uint8_t secret[SHOAL_SECRET_BYTES];
    int lfd, port;
    if (shoal_sock_resolve("127.0.0.1:0", 0, &addr) != SHOAL_OK ||
        shoal_sock_listen(&addr, &lfd) != SHOAL_OK)
        return -1;
    int rc = harness_relay_start(shoal_sock_port(&addr), flip_at, relay_p, &port) != 0 ||
             shoal_auth_random(secret, sizeof(secret)) != SHOAL_OK;
    via = addr;
    if (!rc) {
        shoal_sock_set_port(&via, (uint16_t)port);
        rc = shoal_bootstrap_id_make(&via, secret, id) != SHOAL_OK ||
             shoal_bootstrap_listener_offer(id, lfd) != SHOAL_OK;
    }
    close(lfd);
    return rc ? -1 : 0;
}

const unsigned char *harness_relay_log(const harness_relay_t *relay, size_t *len_p)
{
    *len_p = relay->shared->len;
    return relay->shared->log;
}

int harness_relay_flipped(const harness_relay_t *relay)
{
    return relay->shared->flipped;
}

void harness_relay_stop(harness_relay_t *relay, int timeout_s)
{
    if (relay->pid > 0)
        harness_wait(relay->pid, timeout_s);
    munmap(relay->shared, sizeof(*relay->shared));
    free(relay);
}

int harness_threads(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = name ? fopen(path, "r") : NULL;
        if (f) {
            if (fgets(comm, sizeof(comm), f))
                comm[strcspn(comm, "\n")] = '\0';
            fclose(f);
        }
        n += !name || !strcmp(comm, name);
    }
    closedir(d);
    return n;
}

unsigned long long harness_direct_puts(shoal_comm_t comm)
{
    unsigned long long puts = 0;
    for (int q = 0; q < comm->team.nranks; q++) {
        if (comm->team.eps[q])
            puts += comm->team.eps[q]->puts;
    }
    return puts;
}
