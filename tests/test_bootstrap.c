/* Bootstrap network: joining through rank 0, the control collectives, and
 * everything that must not break or stall it: impostors with the wrong
 * secret, strangers sending garbage or nothing, ranks that never arrive,
 * die, disagree or get aborted. Ranks are forked processes; ordering between
 * them comes from pipes, never from sleeps. */
#include "harness.h"

#include "core/bootstrap.h"
#include "base/clock.h"
#include "base/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SEC 1000000000ull

static uint64_t boot_timeout(void)
{
    return shoal_config_get()->core.timeout_ns;
}

static uint8_t pattern(int rank, size_t i)
{
    return (uint8_t)(rank * 37 + (int)(i * 11) + 1);
}

/* Fork nprocs processes running fn with a given id (the harness makes its
 * own id; these tests need one built from a known address). */
static int run_procs(int nprocs, harness_rank_fn_t fn, void *arg, const shoal_unique_id_t *id,
                     int timeout_s)
{
    pid_t pids[16];
    if (nprocs > 16)
        return -1;
    fflush(NULL);
    for (int i = 0; i < nprocs; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int rc = fn(i, nprocs, id, arg);
            fflush(NULL);
            _exit(rc ? 1 : 0);
        }
    }
    int failed = 0;
    for (int i = 0; i < nprocs; i++) {
        int rc = harness_wait(pids[i], timeout_s);
        if (rc != 0) {
            fprintf(stderr, "# process %d/%d: %s\n", i, nprocs,
                    rc < 0 ? "killed or timed out" : "failed");
            failed = 1;
        }
    }
    return failed ? -1 : 0;
}

/* A port nobody listens on right now, for ids built from a known address. */
static uint16_t free_port(shoal_sockaddr_t *addr)
{
    int fd;
    shoal_sock_set_port(addr, 0);
    if (shoal_sock_listen(addr, &fd) != SHOAL_OK)
        return 0;
    close(fd);
    return shoal_sock_port(addr);
}

/* Redirect this process's stderr, where the log goes, to a file so that a
 * rank can check what it logged; the text is passed on to the real stderr. */
typedef struct {
    int saved;
    char path[64];
} capture_t;

static int capture_start(capture_t *c)
{
    strcpy(c->path, "/tmp/shoal-test-log-XXXXXX");
    int fd = mkstemp(c->path);
    if (fd < 0)
        return -1;
    fflush(stderr);
    c->saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    return 0;
}

static int capture_stop(capture_t *c, const char *needle)
{
    static char text[1 << 16];
    fflush(stderr);
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    FILE *f = fopen(c->path, "r");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    unlink(c->path);
    text[n] = '\0';
    fputs(text, stderr);
    return strstr(text, needle) != NULL;
}

/* Read one byte from a pipe: the signal that another process got this far. */
static char wait_signal(int fd)
{
    char b = 0;
    return read(fd, &b, 1) == 1 ? b : 0;
}

static void send_signal(int fd, char b)
{
    if (write(fd, &b, 1) != 1)
        perror("write");
}

/* ---- the collectives ---------------------------------------------------- */

static int check_collectives(shoal_bootstrap_t *bs, int rank, int n)
{
    shoal_status_t s;

    /* Every rank holds the same secret. */
    uint8_t(*secrets)[SHOAL_SECRET_BYTES] = calloc((size_t)n, SHOAL_SECRET_BYTES);
    RANK_CHECK(secrets, fail, "calloc");
    memcpy(secrets[rank], shoal_bootstrap_secret(bs), SHOAL_SECRET_BYTES);
    s = shoal_bootstrap_allgather(bs, secrets, SHOAL_SECRET_BYTES);
    RANK_CHECK(s == SHOAL_OK, fail, "allgather secrets: %s", shoal_status_string(s));
    for (int r = 0; r < n; r++)
        RANK_CHECK(!memcmp(secrets[r], secrets[0], SHOAL_SECRET_BYTES), fail, "secret of rank %d",
                   r);
    free(secrets);

    /* An odd block size, and one larger than socket buffers. */
    static const size_t lens[] = {13, 300 * 1024};
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        size_t len = lens[k];
        uint8_t *buf = malloc(len * (size_t)n);
        RANK_CHECK(buf, fail, "malloc");
        memset(buf, 0xee, len * (size_t)n);
        for (size_t i = 0; i < len; i++)
            buf[(size_t)rank * len + i] = pattern(rank, i);
        s = shoal_bootstrap_allgather(bs, buf, len);
        RANK_CHECK(s == SHOAL_OK, fail, "allgather %zu: %s", len, shoal_status_string(s));
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < len; i++)
                RANK_CHECK(buf[(size_t)r * len + i] == pattern(r, i), fail,
                           "allgather %zu: block %d byte %zu", len, r, i);
        free(buf);
    }

    /* Broadcast from every root, with and without data. */
    for (int root = 0; root < n; root++) {
        uint8_t buf[1000];
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = rank == root ? pattern(root, i) : 0xee;
        s = shoal_bootstrap_bcast(bs, buf, sizeof(buf), root);
        RANK_CHECK(s == SHOAL_OK, fail, "bcast from %d: %s", root, shoal_status_string(s));
        for (size_t i = 0; i < sizeof(buf); i++)
            RANK_CHECK(buf[i] == pattern(root, i), fail, "bcast from %d: byte %zu", root, i);
        s = shoal_bootstrap_bcast(bs, NULL, 0, root);
        RANK_CHECK(s == SHOAL_OK, fail, "empty bcast from %d: %s", root, shoal_status_string(s));
    }

    for (int i = 0; i < 3; i++) {
        s = shoal_bootstrap_barrier(bs);
        RANK_CHECK(s == SHOAL_OK, fail, "barrier %d: %s", i, shoal_status_string(s));
    }
    return 0;
fail:
    return 1;
}

static int collectives_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    const char *expect_addr = arg;
    shoal_bootstrap_t *bs;
    shoal_status_t s = shoal_bootstrap_init(id, rank, n, boot_timeout(), &bs);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    const shoal_sockaddr_t *local = shoal_bootstrap_local_addr(bs);
    RANK_CHECK(local->u.sa.sa_family == AF_INET || local->u.sa.sa_family == AF_INET6, fail,
               "local address family %d", local->u.sa.sa_family);
    if (expect_addr) {
        char text[SHOAL_SOCKADDR_STRLEN];
        RANK_CHECK(!strcmp(shoal_sock_str(local, text), expect_addr), fail, "local address %s",
                   text);
    }
    if (check_collectives(bs, rank, n))
        return 1;
    shoal_bootstrap_destroy(bs);
    return 0;
fail:
    return 1;
}

static void test_collectives_1_to_8(void **state)
{
    for (int n = 1; n <= 8; n++)
        assert_int_equal(harness_run_ranks(n, collectives_rank, NULL, 60), 0);
}

static void test_ifname_lo(void **state)
{
    harness_setenv("SHOAL_SOCKET_IFNAME", "lo");
    int rc = harness_run_ranks(3, collectives_rank, "127.0.0.1:0", 60);
    harness_setenv("SHOAL_SOCKET_IFNAME", NULL);
    assert_int_equal(rc, 0);
}

/* An id built from an address (as launchers do): rank 0 binds it itself,
 * and ranks that come first retry until it listens. */
static void run_made_id(const char *host)
{
    shoal_sockaddr_t root;
    assert_int_equal(shoal_sock_resolve(host, 0, &root), SHOAL_OK);
    if (!free_port(&root))
        skip();
    uint8_t secret[SHOAL_SECRET_BYTES];
    assert_int_equal(shoal_auth_random(secret, sizeof(secret)), SHOAL_OK);
    shoal_unique_id_t id;
    assert_int_equal(shoal_bootstrap_id_make(&root, secret, &id), SHOAL_OK);
    assert_int_equal(run_procs(4, collectives_rank, NULL, &id, 60), 0);
}

static void test_made_id_ipv4(void **state)
{
    run_made_id("127.0.0.1");
}

static void test_made_id_ipv6(void **state)
{
    run_made_id("::1");
}

static void test_bad_arguments(void **state)
{
    shoal_unique_id_t id, zero;
    shoal_bootstrap_t *bs;
    memset(&zero, 0, sizeof(zero));
    assert_int_equal(shoal_bootstrap_init(&zero, 0, 1, SEC, &bs), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_bootstrap_id_create(&id), SHOAL_OK);
    assert_int_equal(shoal_bootstrap_init(&id, 2, 2, SEC, &bs), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_bootstrap_init(&id, -1, 2, SEC, &bs), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_bootstrap_init(&id, 0, 0, SEC, &bs), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_bootstrap_init(NULL, 0, 1, SEC, &bs), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_bootstrap_id_create(NULL), SHOAL_ERR_INVALID_ARG);

    /* A single rank needs nobody; its collectives still check arguments. */
    assert_int_equal(shoal_bootstrap_init(&id, 0, 1, SEC, &bs), SHOAL_OK);
    char buf[4] = "abc";
    assert_int_equal(shoal_bootstrap_bcast(bs, buf, sizeof(buf), 1), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_bootstrap_bcast(bs, buf, sizeof(buf), -1), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_bootstrap_allgather(bs, NULL, 4), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_bootstrap_allgather(bs, buf, sizeof(buf)), SHOAL_OK);
    assert_int_equal(shoal_bootstrap_bcast(bs, buf, sizeof(buf), 0), SHOAL_OK);
    assert_int_equal(shoal_bootstrap_barrier(bs), SHOAL_OK);
    assert_string_equal(buf, "abc");
    shoal_bootstrap_destroy(bs);
}

/* Ranks as threads of one process: rank 0 takes the listener that
 * shoal_bootstrap_id_create left in this process. */
typedef struct {
    pthread_t thread;
    int rank, nranks, rc;
    const shoal_unique_id_t *id;
} thread_rank_t;

static void *thread_rank_main(void *arg)
{
    thread_rank_t *t = arg;
    t->rc = collectives_rank(t->rank, t->nranks, t->id, NULL);
    return NULL;
}

static void test_threads_as_ranks(void **state)
{
    enum { N = 4 };
    shoal_unique_id_t id;
    assert_int_equal(shoal_bootstrap_id_create(&id), SHOAL_OK);
    thread_rank_t t[N];
    for (int r = 0; r < N; r++) {
        t[r] = (thread_rank_t){.rank = r, .nranks = N, .id = &id, .rc = -1};
        assert_int_equal(pthread_create(&t[r].thread, NULL, thread_rank_main, &t[r]), 0);
    }
    for (int r = 0; r < N; r++) {
        pthread_join(t[r].thread, NULL);
        assert_int_equal(t[r].rc, 0);
    }
}

static int count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

/* A process that makes ids only for others keeps a bounded number of
 * listeners open; the newest ids still work. */
static void test_unused_ids_bounded(void **state)
{
    int before = count_fds();
    shoal_unique_id_t id;
    for (int i = 0; i < 300; i++)
        assert_int_equal(shoal_bootstrap_id_create(&id), SHOAL_OK);
    assert_true(count_fds() - before <= 128);
    assert_int_equal(harness_run_ranks(1, collectives_rank, NULL, 60), 0);
    shoal_bootstrap_t *bs;
    assert_int_equal(shoal_bootstrap_init(&id, 0, 1, SEC, &bs), SHOAL_OK);
    shoal_bootstrap_destroy(bs);
}

/* ---- impostors and strangers -------------------------------------------- */

typedef struct {
    int nreal;                           /* real ranks; extra processes follow */
    int pipefd[2];                       /* extras tell rank 1 they are done */
    uint8_t secret_mask[SHOAL_UNIQUE_ID_BYTES];
    shoal_sockaddr_t root;
} extras_t;

/* Which bytes of an id are the secret, found from two ids that differ only
 * in it. */
static void find_secret_bytes(uint8_t mask[SHOAL_UNIQUE_ID_BYTES])
{
    shoal_sockaddr_t addr;
    assert_int_equal(shoal_sock_resolve("127.0.0.1:1", 0, &addr), SHOAL_OK);
    uint8_t s1[SHOAL_SECRET_BYTES], s2[SHOAL_SECRET_BYTES];
    memset(s1, 0x00, sizeof(s1));
    memset(s2, 0xff, sizeof(s2));
    shoal_unique_id_t a, b;
    assert_int_equal(shoal_bootstrap_id_make(&addr, s1, &a), SHOAL_OK);
    assert_int_equal(shoal_bootstrap_id_make(&addr, s2, &b), SHOAL_OK);
    int count = 0;
    for (int i = 0; i < SHOAL_UNIQUE_ID_BYTES; i++) {
        mask[i] = a.bytes[i] != b.bytes[i];
        count += mask[i];
    }
    assert_int_equal(count, SHOAL_SECRET_BYTES);
}

/* The real ranks of the extras tests: rank 1 joins only after the extra
 * processes are done (or, for silent ones, in place), and rank 0 checks it
 * logged what they did. */
static int real_rank(int rank, const extras_t *x, const shoal_unique_id_t *id, int nsignals,
                     const char *expect_log)
{
    for (int i = 0; rank == 1 && i < nsignals; i++)
        wait_signal(x->pipefd[0]);
    capture_t cap;
    RANK_CHECK(rank != 0 || capture_start(&cap) == 0, fail, "capture");
    shoal_bootstrap_t *bs;
    shoal_status_t s = shoal_bootstrap_init(id, rank, x->nreal, boot_timeout(), &bs);
    int logged = rank == 0 ? capture_stop(&cap, expect_log) : 1;
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    RANK_CHECK(logged, fail, "rank 0 did not log \"%s\"", expect_log);
    if (check_collectives(bs, rank, x->nreal))
        return 1;
    shoal_bootstrap_destroy(bs);
    return 0;
fail:
    return 1;
}

static int impostor_rank(int rank, int nprocs, const shoal_unique_id_t *id, void *arg)
{
    extras_t *x = arg;
    if (rank < x->nreal)
        return real_rank(rank, x, id, 1, "failed authentication");
    /* Same root, same rank as a real one, wrong secret. */
    shoal_unique_id_t bad = *id;
    for (int i = 0; i < SHOAL_UNIQUE_ID_BYTES; i++)
        if (x->secret_mask[i])
            bad.bytes[i] ^= 0x5a;
    shoal_bootstrap_t *bs;
    shoal_status_t s = shoal_bootstrap_init(&bad, 1, x->nreal, boot_timeout(), &bs);
    send_signal(x->pipefd[1], 'i');
    RANK_CHECK(s == SHOAL_ERR_AUTH, fail, "impostor: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_wrong_secret_refused(void **state)
{
    extras_t x = {.nreal = 3};
    find_secret_bytes(x.secret_mask);
    assert_int_equal(pipe(x.pipefd), 0);
    int rc = harness_run_ranks(x.nreal + 1, impostor_rank, &x, 60);
    close(x.pipefd[0]);
    close(x.pipefd[1]);
    assert_int_equal(rc, 0);
}

static int stranger_rank(int rank, int nprocs, const shoal_unique_id_t *id, void *arg)
{
    extras_t *x = arg;
    if (rank < x->nreal)
        return real_rank(rank, x, id, 2, "not a shoal handshake");
    uint64_t deadline = shoal_deadline_after(30 * SEC);
    int fd;
    /* Rank 0 binds the port itself, perhaps after this connects: retry. */
    shoal_status_t s = shoal_sock_connect(&x->root, deadline, &fd);
    RANK_CHECK(s == SHOAL_OK, fail, "stranger connect: %s", shoal_status_string(s));
    if (rank == x->nreal) {
        /* Garbage: dropped as soon as rank 0 reads it. */
        static const char garbage[] = "GET / HTTP/1.1\r\nHost: shoal\r\n\r\n";
        s = shoal_sock_send_all(fd, garbage, sizeof(garbage), deadline);
        RANK_CHECK(s == SHOAL_OK, fail, "garbage: %s", shoal_status_string(s));
        char byte;
        do
            s = shoal_sock_recv_all(fd, &byte, 1, deadline);
        while (s == SHOAL_OK);
        RANK_CHECK(s == SHOAL_ERR_PEER, fail, "garbage sender not dropped: %s",
                   shoal_status_string(s));
        send_signal(x->pipefd[1], 'g');
    } else {
        /* Silence: take the challenge, answer nothing, and stay connected
         * while the real ranks join; rank 0 hangs up when it is done. */
        uint8_t challenge[40];
        s = shoal_sock_recv_all(fd, challenge, sizeof(challenge), deadline);
        RANK_CHECK(s == SHOAL_OK, fail, "silent stranger: no challenge: %s",
                   shoal_status_string(s));
        send_signal(x->pipefd[1], 's');
        s = shoal_sock_recv_all(fd, challenge, 1, deadline);
        RANK_CHECK(s == SHOAL_ERR_PEER, fail, "silent stranger: %s", shoal_status_string(s));
    }
    close(fd);
    return 0;
fail:
    return 1;
}

static void test_strangers_do_not_stall(void **state)
{
    extras_t x = {.nreal = 3};
    assert_int_equal(shoal_sock_resolve("127.0.0.1", 0, &x.root), SHOAL_OK);
    assert_int_not_equal(free_port(&x.root), 0);
    uint8_t secret[SHOAL_SECRET_BYTES];
    assert_int_equal(shoal_auth_random(secret, sizeof(secret)), SHOAL_OK);
    shoal_unique_id_t id;
    assert_int_equal(shoal_bootstrap_id_make(&x.root, secret, &id), SHOAL_OK);
    assert_int_equal(pipe(x.pipefd), 0);
    int rc = run_procs(x.nreal + 2, stranger_rank, &x, &id, 60);
    close(x.pipefd[0]);
    close(x.pipefd[1]);
    assert_int_equal(rc, 0);
}

/* Two processes claim rank 1. The first to join is kept; the second is
 * refused while rank 2 still holds the job open, since rank 2 joins only
 * once one claimant has its answer, which can only be the refused one. */
typedef struct {
    int pipefd[2];
    shoal_status_t *status;              /* shared: one per claimant */
    int nranks_claim;                    /* nranks the second claimant gives */
} claim_t;

static int claim_rank(int rank, int nprocs, const shoal_unique_id_t *id, void *arg)
{
    claim_t *c = arg;
    const int n = 3;
    int claimant = rank == 1 ? 0 : rank == 3 ? 1 : -1;
    if (rank == 2)
        wait_signal(c->pipefd[0]);
    int my_rank = claimant >= 0 ? 1 : rank;
    int my_n = claimant == 1 ? c->nranks_claim : n;
    shoal_bootstrap_t *bs;
    shoal_status_t s = shoal_bootstrap_init(id, my_rank, my_n, boot_timeout(), &bs);
    if (claimant >= 0) {
        c->status[claimant] = s;
        send_signal(c->pipefd[1], 'c');
        if (s != SHOAL_OK)
            return 0;
    }
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    int ret = check_collectives(bs, my_rank, n);
    shoal_bootstrap_destroy(bs);
    return ret;
fail:
    return 1;
}

static void run_claims(int nranks_claim, shoal_status_t expect_second)
{
    claim_t c = {.nranks_claim = nranks_claim};
    c.status = mmap(NULL, 2 * sizeof(*c.status), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(c.status != MAP_FAILED);
    c.status[0] = c.status[1] = SHOAL_STATUS_COUNT;
    assert_int_equal(pipe(c.pipefd), 0);
    int rc = harness_run_ranks(4, claim_rank, &c, 60);
    close(c.pipefd[0]);
    close(c.pipefd[1]);
    shoal_status_t s0 = c.status[0], s1 = c.status[1];
    munmap(c.status, 2 * sizeof(*c.status));
    assert_int_equal(rc, 0);
    if (nranks_claim == 3) {
        /* Either claimant may win, exactly one does. */
        assert_true((s0 == SHOAL_OK && s1 == expect_second) ||
                    (s1 == SHOAL_OK && s0 == expect_second));
    } else {
        assert_int_equal(s0, SHOAL_OK);
        assert_int_equal(s1, expect_second);
    }
}

static void test_duplicate_rank_refused(void **state)
{
    run_claims(3, SHOAL_ERR_INVALID_ARG);
}

static void test_nranks_mismatch_refused(void **state)
{
    run_claims(5, SHOAL_ERR_INVALID_ARG);
}

/* ---- failures ----------------------------------------------------------- */

static int missing_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    int missing = *(int *)arg;
    if (rank == missing)
        return 0;
    shoal_bootstrap_t *bs;
    shoal_status_t s = shoal_bootstrap_init(id, rank, n, boot_timeout(), &bs);
    RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "init without rank %d: %s", missing,
               shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_missing_rank_times_out(void **state)
{
    harness_setenv("SHOAL_TIMEOUT", "1s");
    int rc = 0;
    for (int missing = 0; missing < 3 && rc == 0; missing++)
        rc = harness_run_ranks(3, missing_rank, &missing, 30);
    int missing = 4;
    if (rc == 0)
        rc = harness_run_ranks(5, missing_rank, &missing, 30);
    harness_setenv("SHOAL_TIMEOUT", NULL);
    assert_int_equal(rc, 0);
}

/* Rank 2 leaves after init without a goodbye (as a crash or an abort
 * would): the next collective fails on the others with rank 2 named,
 * without waiting for the timeout. */
static int death_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    shoal_bootstrap_t *bs;
    shoal_status_t s = shoal_bootstrap_init(id, rank, n, boot_timeout(), &bs);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    if (rank == 2) {
        shoal_bootstrap_abort(bs);
        shoal_bootstrap_destroy(bs);
        return 0;
    }
    capture_t cap;
    RANK_CHECK(capture_start(&cap) == 0, fail, "capture");
    int buf[4] = {rank, rank, rank, rank};
    s = shoal_bootstrap_allgather(bs, buf, sizeof(int));
    int named =
        capture_stop(&cap, rank == 0 ? "connection to rank 2 broke" : "because of rank 2");
    RANK_CHECK(s == SHOAL_ERR_PEER, fail, "allgather: %s", shoal_status_string(s));
    RANK_CHECK(named, fail, "rank 2 not named in the log");
    s = shoal_bootstrap_barrier(bs);
    RANK_CHECK(s == SHOAL_ERR_PEER, fail, "barrier after failure: %s", shoal_status_string(s));
    shoal_bootstrap_destroy(bs);
    return 0;
fail:
    return 1;
}

static void test_dead_rank_named(void **state)
{
    assert_int_equal(harness_run_ranks(4, death_rank, NULL, 60), 0);
}

/* Rank 2 gathers a different size: an error on every rank, not corruption. */
static int mismatch_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    shoal_bootstrap_t *bs;
    shoal_status_t s = shoal_bootstrap_init(id, rank, n, boot_timeout(), &bs);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    uint8_t buf[3 * 16];
    memset(buf, rank, sizeof(buf));
    s = shoal_bootstrap_allgather(bs, buf, rank == 2 ? 16 : 8);
    RANK_CHECK(s == SHOAL_ERR_INTERNAL, fail, "mismatched allgather: %s", shoal_status_string(s));
    s = shoal_bootstrap_barrier(bs);
    RANK_CHECK(s == SHOAL_ERR_INTERNAL, fail, "barrier after mismatch: %s", shoal_status_string(s));
    shoal_bootstrap_destroy(bs);
    return 0;
fail:
    return 1;
}

static void test_mismatch_detected(void **state)
{
    assert_int_equal(harness_run_ranks(3, mismatch_rank, NULL, 60), 0);
}

static void *abort_thread(void *arg)
{
    shoal_bootstrap_abort(arg);
    return NULL;
}

/* Abort from another thread ends a barrier that rank 0 never joins, and
 * every later call; rank 0 waits for rank 1 to be done. */
static int abort_rank(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    int *pipefd = arg;
    shoal_bootstrap_t *bs;
    shoal_status_t s = shoal_bootstrap_init(id, rank, n, boot_timeout(), &bs);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    if (rank == 0) {
        wait_signal(pipefd[0]);
        shoal_bootstrap_destroy(bs);
        return 0;
    }
    pthread_t t;
    RANK_CHECK(pthread_create(&t, NULL, abort_thread, bs) == 0, fail, "pthread_create");
    s = shoal_bootstrap_barrier(bs);
    pthread_join(t, NULL);
    send_signal(pipefd[1], 'a');
    RANK_CHECK(s == SHOAL_ERR_ABORTED, fail, "barrier during abort: %s", shoal_status_string(s));
    shoal_bootstrap_abort(bs);
    s = shoal_bootstrap_barrier(bs);
    RANK_CHECK(s == SHOAL_ERR_ABORTED, fail, "barrier after abort: %s", shoal_status_string(s));
    shoal_bootstrap_destroy(bs);
    return 0;
fail:
    return 1;
}

static void test_abort_wakes(void **state)
{
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    int rc = harness_run_ranks(2, abort_rank, pipefd, 60);
    close(pipefd[0]);
    close(pipefd[1]);
    assert_int_equal(rc, 0);
}

/* ---- integrity of control messages (SHOAL_BOOTSTRAP_MAC) ---------------- */

/* Bytes rank 1 sends rank 0 before its first message: the handshake's
 * proof (auth.c) and the hello. */
#define TAMPER_PROOF 72
#define TAMPER_HELLO 20

typedef struct {
    int mac[2];            /* SHOAL_BOOTSTRAP_MAC of each rank */
    shoal_status_t expect; /* what both ranks' all-gather (or init) returns */
    int at_init;           /* the failure comes at init */
    const char *log0;      /* what rank 0 logs, or NULL */
} tamper_t;

static int tamper_rank(int rank, int nprocs, const shoal_unique_id_t *id, void *arg)
{
    const tamper_t *t = arg;
    harness_setenv("SHOAL_BOOTSTRAP_MAC", t->mac[rank] ? "y" : "n");
    capture_t cap;
    RANK_CHECK(rank != 0 || capture_start(&cap) == 0, fail, "capture");
    shoal_bootstrap_t *bs = NULL;
    shoal_status_t s = shoal_bootstrap_init(id, rank, 2, (t->at_init ? 3 : 10) * SEC, &bs);
    uint8_t buf[2][8];
    if (s == SHOAL_OK) {
        for (int i = 0; i < 8; i++)
            buf[rank][i] = pattern(rank, (size_t)i);
        s = shoal_bootstrap_allgather(bs, buf, sizeof(buf[0]));
    }
    int logged = rank == 0 && t->log0 ? capture_stop(&cap, t->log0) : 1;
    if (rank == 0 && !t->log0)
        capture_stop(&cap, "");
    if (t->at_init && rank == 1)
        RANK_CHECK(s == t->expect, fail, "rank %d: init got %s", rank, shoal_status_string(s));
    else if (!t->at_init)
        RANK_CHECK(s == t->expect, fail, "rank %d: got %s, not %s", rank,
                   shoal_status_string(s), shoal_status_string(t->expect));
    RANK_CHECK(logged, fail, "rank 0 did not log \"%s\"", t->log0);
    if (s == SHOAL_OK) {
        /* Without tags the flipped byte arrives as it is, and rank 0
         * passes it on: rank 1's block differs in one byte everywhere. */
        int diff = 0;
        for (int i = 0; i < 8; i++)
            diff += buf[1][i] != pattern(1, (size_t)i);
        RANK_CHECK(diff == (t->mac[0] ? 0 : 1), fail, "rank %d: %d bytes of rank 1 changed",
                   rank, diff);
    }
    if (bs)
        shoal_bootstrap_destroy(bs);
    return 0;
fail:
    return 1;
}

/* Rank 1 reaches rank 0 through a relay that flips one bit of rank 1's
 * stream at flip_at; the ranks run t. */
static void run_tampered(long flip_at, const tamper_t *t)
{
    harness_relay_t *relay;
    shoal_unique_id_t id;
    assert_int_equal(harness_relay_id(flip_at, &relay, &id), 0);
    int rc = run_procs(2, tamper_rank, (void *)t, &id, 60);
    shoal_bootstrap_listener_withdraw(&id);
    int flipped = harness_relay_flipped(relay);
    harness_relay_stop(relay, 30);
    assert_int_equal(rc, 0);
    assert_true(flipped || flip_at < 0);
}

/* A bit of rank 1's all-gather payload, then of its header, changed on the
 * wire: with tags, both ranks fail with SHOAL_ERR_AUTH and rank 0 names
 * rank 1; without, the changed byte is delivered (what the option is for). */
static void test_mac_tamper_detected(void **state)
{
    const long first = TAMPER_PROOF + TAMPER_HELLO;
    const long payload = first + 16 + 32 + 3, header = first + 7;
    tamper_t on = {{1, 1}, SHOAL_ERR_AUTH, 0, "from rank 1 fails its integrity check"};
    run_tampered(payload, &on);
    run_tampered(header, &on);
    tamper_t off = {{0, 0}, SHOAL_OK, 0, NULL};
    run_tampered(first + 16 + 3, &off);
    /* Untouched, tagged messages pass. */
    tamper_t clean = {{1, 1}, SHOAL_OK, 0, NULL};
    run_tampered(-1, &clean);
}

/* Ranks that disagree about SHOAL_BOOTSTRAP_MAC: rank 0 refuses the other,
 * saying why, in the framing that rank reads. */
static void test_mac_setting_mismatch_refused(void **state)
{
    tamper_t t = {{1, 0}, SHOAL_ERR_INVALID_ARG, 1, "SHOAL_BOOTSTRAP_MAC differs"};
    run_tampered(-1, &t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_collectives_1_to_8),
        cmocka_unit_test(test_ifname_lo),
        cmocka_unit_test(test_made_id_ipv4),
        cmocka_unit_test(test_made_id_ipv6),
        cmocka_unit_test(test_threads_as_ranks),
        cmocka_unit_test(test_unused_ids_bounded),
        cmocka_unit_test(test_wrong_secret_refused),
        cmocka_unit_test(test_strangers_do_not_stall),
        cmocka_unit_test(test_duplicate_rank_refused),
        cmocka_unit_test(test_nranks_mismatch_refused),
        cmocka_unit_test(test_missing_rank_times_out),
        cmocka_unit_test(test_dead_rank_named),
        cmocka_unit_test(test_mismatch_detected),
        cmocka_unit_test(test_abort_wakes),
        cmocka_unit_test(test_mac_tamper_detected),
        cmocka_unit_test(test_mac_setting_mismatch_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
