/* Test harness: ranks as forked processes. Every test binary is a cmocka
 * group whose TAP output prove reads. */
#ifndef SHOAL_TEST_HARNESS_H
#define SHOAL_TEST_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "shoal.h"

/* Body of one rank; runs in its own process. Returns 0 on success. */
typedef int (*harness_rank_fn_t)(int rank, int nranks, const shoal_unique_id_t *id,
                                 void *arg);

/* Fork nranks processes that run fn with one fresh unique id (created in
 * this process, which is why settings must be in the environment before).
 * Returns 0 when every rank exited 0 within timeout_s seconds; otherwise
 * kills the rest, prints which rank failed and how, and returns -1. */
int harness_run_ranks(int nranks, harness_rank_fn_t fn, void *arg, int timeout_s);
/* The same, except that rank victim may die of SIGKILL (fault tests). */
int harness_run_ranks_victim(int nranks, harness_rank_fn_t fn, void *arg, int timeout_s,
                             int victim);

/* Wait for child pid up to timeout_s; returns its exit status, or -1 if it
 * was killed by a signal or timed out (then it is killed). */
int harness_wait(int pid, int timeout_s);

/* Set (value != NULL) or unset an environment variable and re-read shoal's
 * settings. */
void harness_setenv(const char *name, const char *value);

/* Inside a rank, before it creates a communicator: place it on one of
 * nhosts "hosts" of this machine, ranks in blocks (host h holds the ranks
 * with rank * nhosts / nranks == h), named by SHOAL_HOST_ID=ibhost<h>, so
 * that ranks of other hosts are reached through the inter-host transport
 * (tcp where there is no RDMA port) and only ranks of one host share
 * memory. Inside the RDMA test guest (SHOAL_TEST_RXE=1), host h also gets
 * the Soft-RoCE device rxe<h> alone (SHOAL_IB_HCA==rxe<h>, whose leading
 * '=' asks for that exact name). Re-reads shoal's settings; returns h. */
int harness_split_hosts(int rank, int nranks, int nhosts);

/* A relay: a process listening on 127.0.0.1, which takes one connection,
 * connects it to 127.0.0.1:target_port and passes the bytes both ways,
 * recording them all (up to HARNESS_RELAY_LOG bytes, in memory this
 * process reads) and, when flip_at >= 0, flipping the lowest bit of the
 * byte at that offset of the stream from the connecting side: an
 * eavesdropper and a tamperer on the wire. *port_p is its port. It ends
 * when either side closes. */
#define HARNESS_RELAY_LOG (1 << 20)
typedef struct harness_relay harness_relay_t;
int harness_relay_start(int target_port, long flip_at, harness_relay_t **relay_p, int *port_p);
/* Everything relayed so far, both directions interleaved, and its length. */
const unsigned char *harness_relay_log(const harness_relay_t *relay, size_t *len_p);
/* Whether the relay flipped its byte. */
int harness_relay_flipped(const harness_relay_t *relay);
/* Wait for the relay to end (killing it after timeout_s) and free it. */
void harness_relay_stop(harness_relay_t *relay, int timeout_s);
/* A two-rank job's id, with a random secret, whose address is a relay
 * (flip_at as above) in front of a listener on 127.0.0.1 that rank 0 of
 * the id takes over (shoal_bootstrap_listener_offer): rank 1's bootstrap
 * connection runs through the relay. Withdraw the listener with
 * shoal_bootstrap_listener_withdraw after the job. 0 on success. */
int harness_relay_id(long flip_at, harness_relay_t **relay_p, shoal_unique_id_t *id);

/* Whether the run asks for the short matrices (SHOAL_TEST_QUICK=1): the
 * sanitizer builds of CI, whose instrumented code runs many times slower,
 * check the same paths with fewer of the types and rank counts that only
 * the element math tells apart; the plain build runs them all. */
int harness_quick(void);
/* Whether a matrix runs at nranks ranks: every count in the plain build;
 * under SHOAL_TEST_QUICK=1 one rank, two, the odd 3 and 5 and the most, 8
 * (a ring's first wrap, odd blocks, the largest fan); in a TSan build 2
 * and 3 (the threads of a rank's process are what it checks). */
int harness_ranks_wanted(int nranks);
/* The matrices' element types: every dtype in the plain build; under
 * SHOAL_TEST_QUICK=1 int8, float16, float32 and float64 (one of each
 * width, both float paths of the kernels), test_reduce checking every
 * type's math. Fills dts (SHOAL_DTYPE_COUNT entries), returns how many. */
int harness_dtypes(shoal_dtype_t *dts);

/* For the slowest test binaries (training), which CI runs in its plain
 * variant only: called first in main, under SHOAL_TEST_QUICK=1 it prints a
 * TAP plan that skips the whole binary, saying why, and exits 0. */
void harness_plain_only(const char *what);

/* For a test binary whose every case needs root (network namespaces need
 * CAP_SYS_ADMIN): called first in main, when this process is not root it
 * prints a TAP plan that skips the whole binary, "1..0 # SKIP why", which
 * prove accepts, and exits 0. (cmocka's own skip() prints "not ok # SKIP",
 * which prove counts as a failure.) */
void harness_require_root(const char *why);

/* Descriptors open in this process (-1 when /proc cannot say). */
int harness_open_fds(void);

/* Move this process into the network namespace `ip netns add` made under
 * name; 0 on success, -1 otherwise. */
int harness_enter_netns(const char *name);

/* Settings of a collective test: pieces of chunk bytes, shared memory on
 * (transport "shm") or off ("tcp", so every pair of ranks goes over tcp),
 * and a 20 s deadline, so that a rank failing a check, which leaves the
 * others waiting on it, ends the test soon. */
void harness_use_transport(const char *transport, size_t chunk);

/* Inside a rank: 0 when buf[from..to) all equal v, else 1 after reporting
 * the first byte that does not (what names the buffer). */
int harness_check_untouched(const unsigned char *buf, size_t from, size_t to, unsigned char v,
                            int rank, const char *what);

/* For unit tests (cmocka asserts): a malloc'd buffer of bytes followed by
 * HARNESS_GUARD bytes, all set to HARNESS_GUARD_BYTE; and the check that
 * nothing was written into the guard after the first bytes. */
#define HARNESS_GUARD 64
#define HARNESS_GUARD_BYTE 0xa5
void *harness_alloc_guarded(size_t bytes);
void harness_assert_guard(const void *buf, size_t bytes, const char *what);

/* A well-mixed 32-bit hash. */
uint32_t harness_mix(uint32_t x);

/* Inside a rank: the writes straight into peers' memory (put_signal) this
 * rank's endpoints of comm made so far. */
unsigned long long harness_direct_puts(shoal_comm_t comm);

/* Inside a rank, collective: 1 when buf[0..len) holds the same bytes on
 * every rank of comm (a hash compared by a max and a min all-reduce). */
int harness_same_bytes(shoal_comm_t comm, const void *buf, size_t len);

/* Threads of this process (/proc/self/task), or only those named name
 * when it is not NULL (shoal names its progress thread "shoal
 * progress"); -1 when /proc cannot be read. */
int harness_threads(const char *name);

/* Rank's input element i for dtype and op: values whose sums, products,
 * minima and maxima over up to 8 ranks are exact in dtype, so the expected
 * result does not depend on the order of reduction. */
void harness_fill_exact(void *buf, size_t count, int rank, shoal_dtype_t dt, shoal_op_t op);

/* out = op over ranks 0..nranks-1 of harness_fill_exact, through the scalar
 * reference (AVG finished); tmp is scratch of the same size. */
void harness_expected(void *out, void *tmp, size_t count, int nranks, shoal_dtype_t dt,
                      shoal_op_t op);

/* Inside a rank body, where cmocka's asserts cannot be used (they belong to
 * the parent): when cond is false, report it with a message and jump to
 * label, where the body returns its failure. The label is named at every
 * use, so the jump shows where it happens (CONVENTIONS.md: a check macro may
 * jump to a label, never return). */
#define RANK_CHECK(cond, label, ...)                                          \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "# rank check failed at %s:%d: %s: ", __FILE__,   \
                    __LINE__, #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            goto label;                                                       \
        }                                                                     \
    } while (0)

#endif
