/* The bad-input matrix: every public call, blocking and not, inside a group
 * and outside, with each argument it must refuse (NULL buffers, counts whose
 * byte size overflows, unknown dtype or op, root or peer out of range,
 * buffers that overlap other than in place, a NULL request pointer) gets
 * SHOAL_ERR_INVALID_ARG with a reason naming the call; no buffer or request
 * is written, the communicator stays usable and no descriptor is left open.
 * Then the communicator's own state: stopped (SHOAL_ERR_ABORTED),
 * destroyed, aborted, destroyed twice. Then init: an id that is not one, an
 * id whose rank 0 never comes, and ranks that disagree on nranks. */
#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COUNT 4   /* elements per block of a valid call */
#define FILL 0xA5 /* what the buffers hold, before and after */
#define BUF_BYTES (64 * 8 * COUNT * 4)
#define MAX_RANKS 8

enum {
    F_SEND = 1 << 0,    /* sendbuf is read on every rank */
    F_RECV = 1 << 1,    /* recvbuf is written on every rank */
    F_REDUCES = 1 << 2, /* takes an op */
    F_ROOTED = 1 << 3,  /* takes a root */
    F_P2P = 1 << 4,     /* takes a peer */
    F_BLOCKS = 1 << 5,  /* a buffer of nranks blocks on every rank */
    F_PAIR = 1 << 6,    /* both buffers on every rank: the in-place rule */
    F_ARGS = 1 << 7,    /* has buffers, count and dtype at all */
};

typedef struct {
    const void *send;
    void *recv;
    size_t count;
    shoal_dtype_t dtype;
    shoal_op_t op;
    int root; /* or peer */
} args_t;

/* One public call, blocking (req_p unused) or not. */
typedef shoal_status_t (*call_fn_t)(const args_t *a, shoal_comm_t comm, int nb,
                                    shoal_request_t *req_p);

static shoal_status_t do_allreduce(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    return nb ? shoal_iallreduce(a->send, a->recv, a->count, a->dtype, a->op, c, r)
              : shoal_allreduce(a->send, a->recv, a->count, a->dtype, a->op, c);
}

static shoal_status_t do_reduce_scatter(const args_t *a, shoal_comm_t c, int nb,
                                        shoal_request_t *r)
{
    return nb ? shoal_ireduce_scatter(a->send, a->recv, a->count, a->dtype, a->op, c, r)
              : shoal_reduce_scatter(a->send, a->recv, a->count, a->dtype, a->op, c);
}

static shoal_status_t do_allgather(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    return nb ? shoal_iallgather(a->send, a->recv, a->count, a->dtype, c, r)
              : shoal_allgather(a->send, a->recv, a->count, a->dtype, c);
}

static shoal_status_t do_alltoall(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    return nb ? shoal_ialltoall(a->send, a->recv, a->count, a->dtype, c, r)
              : shoal_alltoall(a->send, a->recv, a->count, a->dtype, c);
}

static shoal_status_t do_alltoallv(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    size_t counts[MAX_RANKS], displs[MAX_RANKS];
    for (int i = 0; i < MAX_RANKS; i++) {
        counts[i] = a->count;
        displs[i] = (size_t)i * (a->count < SIZE_MAX / MAX_RANKS ? a->count : 1);
    }
    return nb ? shoal_ialltoallv(a->send, counts, displs, a->recv, counts, displs, a->dtype, c,
                                 r)
              : shoal_alltoallv(a->send, counts, displs, a->recv, counts, displs, a->dtype, c);
}

static shoal_status_t do_broadcast(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    return nb ? shoal_ibroadcast(a->send, a->recv, a->count, a->dtype, a->root, c, r)
              : shoal_broadcast(a->send, a->recv, a->count, a->dtype, a->root, c);
}

static shoal_status_t do_reduce(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    return nb ? shoal_ireduce(a->send, a->recv, a->count, a->dtype, a->op, a->root, c, r)
              : shoal_reduce(a->send, a->recv, a->count, a->dtype, a->op, a->root, c);
}

static shoal_status_t do_gather(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    return nb ? shoal_igather(a->send, a->recv, a->count, a->dtype, a->root, c, r)
              : shoal_gather(a->send, a->recv, a->count, a->dtype, a->root, c);
}

static shoal_status_t do_scatter(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    return nb ? shoal_iscatter(a->send, a->recv, a->count, a->dtype, a->root, c, r)
              : shoal_scatter(a->send, a->recv, a->count, a->dtype, a->root, c);
}

static shoal_status_t do_send(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    return nb ? shoal_isend(a->send, a->count, a->dtype, a->root, c, r)
              : shoal_send(a->send, a->count, a->dtype, a->root, c);
}

static shoal_status_t do_recv(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    return nb ? shoal_irecv(a->recv, a->count, a->dtype, a->root, c, r)
              : shoal_recv(a->recv, a->count, a->dtype, a->root, c);
}

static shoal_status_t do_barrier(const args_t *a, shoal_comm_t c, int nb, shoal_request_t *r)
{
    (void)a;
    return nb ? shoal_ibarrier(c, r) : shoal_barrier(c);
}

static const struct {
    const char *name; /* the blocking call; the other is "shoal_i" + name + 6 */
    call_fn_t fn;
    unsigned flags;
} calls[] = {
    {"shoal_allreduce", do_allreduce, F_ARGS | F_SEND | F_RECV | F_REDUCES | F_PAIR},
    {"shoal_reduce_scatter", do_reduce_scatter,
     F_ARGS | F_SEND | F_RECV | F_REDUCES | F_BLOCKS | F_PAIR},
    {"shoal_allgather", do_allgather, F_ARGS | F_SEND | F_RECV | F_BLOCKS | F_PAIR},
    {"shoal_alltoall", do_alltoall, F_ARGS | F_SEND | F_RECV | F_BLOCKS | F_PAIR},
    {"shoal_alltoallv", do_alltoallv, F_ARGS | F_SEND | F_RECV},
    {"shoal_broadcast", do_broadcast, F_ARGS | F_RECV | F_ROOTED},
    {"shoal_reduce", do_reduce, F_ARGS | F_SEND | F_REDUCES | F_ROOTED},
    {"shoal_gather", do_gather, F_ARGS | F_SEND | F_ROOTED},
    {"shoal_scatter", do_scatter, F_ARGS | F_RECV | F_ROOTED},
    {"shoal_send", do_send, F_ARGS | F_SEND | F_P2P},
    {"shoal_recv", do_recv, F_ARGS | F_RECV | F_P2P},
    {"shoal_barrier", do_barrier, 0},
};
#define NCALLS (sizeof(calls) / sizeof(calls[0]))

/* The defects: each changes a valid call into one that must be refused. */
typedef enum {
    D_NULL_SEND,
    D_NULL_RECV,
    D_DTYPE_BIG,
    D_DTYPE_NEG,
    D_OP_BIG,
    D_OP_NEG,
    D_COUNT_BYTES,  /* count * element size overflows */
    D_COUNT_BLOCKS, /* count * nranks * element size overflows */
    D_ROOT_NEG,
    D_ROOT_BIG,
    D_PEER_NEG,
    D_PEER_BIG,
    D_PEER_SELF, /* send or receive to oneself outside a group */
    D_OVERLAP,   /* buffers overlap, but not in place */
    D_NULL_REQ,  /* non-blocking only */
    D_COUNT
} defect_t;

static const char *const defect_names[D_COUNT] = {
    "NULL sendbuf",          "NULL recvbuf",         "dtype 99",
    "dtype -1",              "op 77",                "op -1",
    "count overflowing",     "count x nranks overflowing",
    "root -1",               "root nranks",          "peer -1",
    "peer nranks",           "peer itself outside a group",
    "buffers overlapping, not in place",             "NULL req_p",
};

/* Whether defect d applies to call flags f (and how it is made). */
static int defect_applies(defect_t d, unsigned f, int nranks, int nb, int in_group)
{
    switch (d) {
    case D_NULL_SEND: return f & F_SEND;
    case D_NULL_RECV: return f & F_RECV;
    case D_DTYPE_BIG:
    case D_DTYPE_NEG:
    case D_COUNT_BYTES: return f & F_ARGS;
    case D_OP_BIG:
    case D_OP_NEG: return f & F_REDUCES;
    case D_COUNT_BLOCKS: return (f & F_BLOCKS) && nranks > 1;
    case D_ROOT_NEG:
    case D_ROOT_BIG: return f & F_ROOTED;
    case D_PEER_NEG:
    case D_PEER_BIG: return f & F_P2P;
    case D_PEER_SELF: return (f & F_P2P) && !in_group;
    case D_OVERLAP: return f & F_PAIR;
    case D_NULL_REQ: return nb;
    case D_COUNT: break;
    }
    return 0;
}

static args_t valid_args(unsigned char *a, unsigned char *b, int rank, int nranks, unsigned f)
{
    return (args_t){.send = a, .recv = b, .count = COUNT, .dtype = SHOAL_INT32,
                    .op = SHOAL_SUM, .root = (f & F_P2P) ? (rank + 1) % nranks : 0};
}

static void apply_defect(defect_t d, args_t *x, unsigned char *a, int rank, int nranks)
{
    switch (d) {
    case D_NULL_SEND: x->send = NULL; break;
    case D_NULL_RECV: x->recv = NULL; break;
    case D_DTYPE_BIG: x->dtype = (shoal_dtype_t)99; break;
    case D_DTYPE_NEG: x->dtype = (shoal_dtype_t)-1; break;
    case D_OP_BIG: x->op = (shoal_op_t)77; break;
    case D_OP_NEG: x->op = (shoal_op_t)-1; break;
    case D_COUNT_BYTES: x->count = SIZE_MAX / 2; break;
    case D_COUNT_BLOCKS: x->count = SIZE_MAX / 4 / (size_t)nranks + 1; break;
    case D_ROOT_NEG:
    case D_PEER_NEG: x->root = -1; break;
    case D_ROOT_BIG:
    case D_PEER_BIG: x->root = nranks; break;
    case D_PEER_SELF: x->root = rank; break;
    case D_OVERLAP: x->recv = a + 4; break;
    case D_NULL_REQ:
    case D_COUNT: break;
    }
}

/* Descriptors open in this rank, not counting the rendezvous listener that
 * rank 0 inherits from the process that made the id (its init takes and
 * closes it): so the count before init equals the count after destroy. */
static int open_fds_of(int rank, int before_init)
{
    int n = harness_open_fds();
    return before_init && rank == 0 ? n - 1 : n;
}

static int untouched(const unsigned char *a, const unsigned char *b, int rank, const char *what)
{
    return harness_check_untouched(a, 0, BUF_BYTES, FILL, rank, what) == 0 &&
           harness_check_untouched(b, 0, BUF_BYTES, FILL, rank, what) == 0;
}

/* Every call x defect x {blocking, non-blocking}; returns the number of
 * refused calls, or -1 after reporting the first wrong answer. */
static int run_matrix(shoal_comm_t comm, int rank, int nranks, int in_group,
                      unsigned char *a, unsigned char *b)
{
    int refused = 0;
    for (size_t c = 0; c < NCALLS; c++) {
        for (int nb = 0; nb < 2; nb++) {
            char name[64];
            snprintf(name, sizeof(name), "%s%s", nb ? "shoal_i" : "", calls[c].name + (nb ? 6 : 0));
            for (int d = 0; d < D_COUNT; d++) {
                if (!defect_applies((defect_t)d, calls[c].flags, nranks, nb, in_group))
                    continue;
                args_t x = valid_args(a, b, rank, nranks, calls[c].flags);
                apply_defect((defect_t)d, &x, a, rank, nranks);
                shoal_request_t req = NULL;
                shoal_status_t s = calls[c].fn(&x, comm, nb, d == D_NULL_REQ ? NULL : &req);
                char what[160];
                snprintf(what, sizeof(what), "%s with %s%s", name, defect_names[d],
                         in_group ? " in a group" : "");
                RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "rank %d: %s gave %s", rank, what,
                           shoal_status_string(s));
                const char *why = shoal_comm_last_error(comm);
                RANK_CHECK(strstr(why, name) != NULL, fail,
                           "rank %d: %s: reason \"%s\" does not name "
                           "the call",
                           rank, what, why);
                RANK_CHECK(req == NULL, fail, "rank %d: %s wrote a request", rank, what);
                if (!untouched(a, b, rank, what))
                    return -1;
                refused++;
            }
        }
    }
    return refused;
fail:
    return 1;
}

/* The communicator still works: an all-reduce gives the right sum. */
static int works(shoal_comm_t comm, int nranks)
{
    int32_t one = 1, sum = 0;
    return shoal_allreduce(&one, &sum, 1, SHOAL_INT32, SHOAL_SUM, comm) == SHOAL_OK &&
           sum == nranks;
}

/* Every call with valid arguments on comm must give want, with a reason
 * containing because. */
static int all_calls_refused(shoal_comm_t comm, int rank, int nranks, shoal_status_t want,
                             const char *because, unsigned char *a, unsigned char *b)
{
    for (size_t c = 0; c < NCALLS; c++) {
        for (int nb = 0; nb < 2; nb++) {
            args_t x = valid_args(a, b, rank, nranks, calls[c].flags);
            shoal_request_t req = NULL;
            shoal_status_t s = calls[c].fn(&x, comm, nb, &req);
            RANK_CHECK(s == want, fail, "rank %d: %s%s gave %s, want %s", rank, calls[c].name,
                       nb ? " (non-blocking)" : "", shoal_status_string(s),
                       shoal_status_string(want));
            RANK_CHECK(strstr(shoal_comm_last_error(comm), because) != NULL, fail,
                       "rank %d: %s: reason \"%s\" lacks \"%s\"", rank, calls[c].name,
                       shoal_comm_last_error(comm), because);
            RANK_CHECK(req == NULL, fail, "rank %d: %s wrote a request", rank, calls[c].name);
        }
    }
    return untouched(a, b, rank, "a call on an unusable communicator") ? 0 : 1;
fail:
    return 1;
}

static int rank_matrix(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    static unsigned char a[BUF_BYTES], b[BUF_BYTES];
    memset(a, FILL, sizeof(a));
    memset(b, FILL, sizeof(b));
    int fds = open_fds_of(rank, 1);
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    /* tcp connects its peers on first use (SHOAL_TCP_CONNECT=lazy): count
     * after a call that did, and allow a dial that lost a tie to the
     * peer's to close meanwhile. */
    RANK_CHECK(works(comm, nranks), fail, "rank %d: first all-reduce: %s", rank,
               shoal_comm_last_error(comm));
    int fds_comm = harness_open_fds();

    int refused = run_matrix(comm, rank, nranks, 0, a, b);
    RANK_CHECK(refused > 0, fail, "rank %d: matrix failed", rank);
    RANK_CHECK(works(comm, nranks), fail, "rank %d: unusable after %d bad calls: %s", rank, refused,
               shoal_comm_last_error(comm));

    /* Pre-multiplied sums: no scalar, unknown dtype, ops that are none. */
    shoal_op_t op = (shoal_op_t)-5;
    int32_t scalar = 2;
    RANK_CHECK(shoal_op_create_premul_sum(comm, NULL, SHOAL_INT32, &op) == SHOAL_ERR_INVALID_ARG,
               fail, "premul sum without a scalar");
    RANK_CHECK(shoal_op_create_premul_sum(comm, &scalar, (shoal_dtype_t)99, &op) ==
                   SHOAL_ERR_INVALID_ARG, fail, "premul sum of dtype 99");
    RANK_CHECK(shoal_op_create_premul_sum(comm, &scalar, SHOAL_INT32, NULL) ==
                   SHOAL_ERR_INVALID_ARG, fail, "premul sum without op_p");
    RANK_CHECK(op == (shoal_op_t)-5, fail, "a refused premul sum wrote *op_p");
    RANK_CHECK(shoal_op_destroy((shoal_op_t)-1, comm) == SHOAL_ERR_INVALID_ARG, fail,
               "destroy op -1");
    RANK_CHECK(shoal_op_destroy(SHOAL_SUM, comm) == SHOAL_ERR_INVALID_ARG, fail,
               "destroy SHOAL_SUM");

    /* The same inside a group: refused when recorded; what was recorded
     * before and after still runs at the end. */
    int32_t one = 1, sum = 0;
    RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group start");
    RANK_CHECK(shoal_allreduce(&one, &sum, 1, SHOAL_INT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
               "all-reduce recorded in a group");
    refused = run_matrix(comm, rank, nranks, 1, a, b);
    shoal_status_t s = shoal_group_end();
    RANK_CHECK(refused > 0, fail, "rank %d: matrix in a group failed", rank);
    RANK_CHECK(s == SHOAL_OK && sum == nranks, fail,
               "rank %d: group after bad calls gave %s, sum %d", rank, shoal_status_string(s), sum);
    RANK_CHECK(harness_open_fds() <= fds_comm, fail, "rank %d: bad calls left %d descriptors open",
               rank, harness_open_fds() - fds_comm);

    /* A stopped communicator refuses everything with SHOAL_ERR_ABORTED;
     * the one made by the same shrink works. */
    shoal_comm_t fresh = NULL;
    s = shoal_comm_shrink(comm, NULL, 0, SHOAL_SHRINK_ABORT, &fresh);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: shrink: %s", rank, shoal_status_string(s));
    RANK_CHECK(all_calls_refused(comm, rank, nranks, SHOAL_ERR_ABORTED, "aborted", a, b) == 0, fail,
               "stopped communicator");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy the stopped communicator");
    RANK_CHECK(works(fresh, nranks), fail, "rank %d: the shrunk communicator fails", rank);

    /* Destroyed: every call, destroy and abort refused as not valid. */
    RANK_CHECK(shoal_comm_destroy(fresh) == SHOAL_OK, fail, "destroy");
    RANK_CHECK(all_calls_refused(fresh, rank, nranks, SHOAL_ERR_INVALID_ARG, "not valid", a, b) ==
                   0, fail, "destroyed communicator");
    RANK_CHECK(shoal_comm_destroy(fresh) == SHOAL_ERR_INVALID_ARG, fail, "double destroy");
    RANK_CHECK(shoal_comm_abort(fresh) == SHOAL_ERR_INVALID_ARG, fail, "abort after destroy");
    RANK_CHECK(all_calls_refused(NULL, rank, nranks, SHOAL_ERR_INVALID_ARG, "NULL", a, b) == 0,
               fail, "NULL communicator");
    RANK_CHECK(harness_open_fds() == fds, fail, "rank %d: %d descriptors left after destroy",
               rank, harness_open_fds() - fds);
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_matrix_shm(void **state)
{
    (void)state;
    harness_use_transport("shm", 4096);
    for (int n = 1; n <= 3; n++)
        assert_int_equal(harness_run_ranks(n, rank_matrix, NULL, 120), 0);
}

static void test_matrix_tcp(void **state)
{
    (void)state;
    harness_use_transport("tcp", 4096);
    assert_int_equal(harness_run_ranks(2, rank_matrix, NULL, 120), 0);
}

/* Aborted (not destroyed): the handle is dead, as after destroy. */
static int rank_aborted(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    static unsigned char a[BUF_BYTES], b[BUF_BYTES];
    memset(a, FILL, sizeof(a));
    memset(b, FILL, sizeof(b));
    int fds = open_fds_of(rank, 1);
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    RANK_CHECK(works(comm, nranks), fail, "all-reduce");
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_OK, fail, "abort");
    RANK_CHECK(all_calls_refused(comm, rank, nranks, SHOAL_ERR_INVALID_ARG, "not valid", a, b) ==
                   0, fail, "aborted communicator");
    RANK_CHECK(shoal_comm_abort(comm) == SHOAL_ERR_INVALID_ARG, fail, "double abort");
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_ERR_INVALID_ARG, fail, "destroy after abort");
    RANK_CHECK(harness_open_fds() == fds, fail, "rank %d: %d descriptors left after abort", rank,
               harness_open_fds() - fds);
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_aborted(void **state)
{
    (void)state;
    harness_use_transport("shm", 4096);
    assert_int_equal(harness_run_ranks(2, rank_aborted, NULL, 60), 0);
}

/* A wait on a request of the caller's own open group would never return
 * (the group runs only at its end): it is refused, the request stays
 * pending, and the group's end then completes it with the right result. */
static int rank_wait_in_group(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    int32_t in = rank + 1, out = 0;
    shoal_request_t req = NULL;
    RANK_CHECK(shoal_group_start() == SHOAL_OK, fail, "group start");
    RANK_CHECK(shoal_iallreduce(&in, &out, 1, SHOAL_INT32, SHOAL_SUM, comm, &req) == SHOAL_OK,
               fail, "iallreduce in a group");
    RANK_CHECK(shoal_wait(&req) == SHOAL_ERR_INVALID_ARG && req != NULL, fail,
               "rank %d: wait inside the group was not refused", rank);
    shoal_request_t all[1] = {req};
    RANK_CHECK(shoal_wait_all(1, all) == SHOAL_ERR_INVALID_ARG && all[0] == req, fail,
               "rank %d: wait_all inside the group was not refused", rank);
    RANK_CHECK(shoal_group_end() == SHOAL_OK, fail, "group end");
    RANK_CHECK(shoal_wait(&req) == SHOAL_OK && req == NULL, fail, "wait after the group");
    RANK_CHECK(out == nranks * (nranks + 1) / 2, fail, "rank %d: sum %d", rank, (int)out);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_wait_in_group(void **state)
{
    (void)state;
    harness_use_transport("shm", 4096);
    harness_setenv("SHOAL_PROGRESS", "caller");
    assert_int_equal(harness_run_ranks(3, rank_wait_in_group, NULL, 60), 0);
    harness_setenv("SHOAL_PROGRESS", "thread");
    assert_int_equal(harness_run_ranks(3, rank_wait_in_group, NULL, 60), 0);
    harness_setenv("SHOAL_PROGRESS", NULL);
}

/* Ids that lead nowhere: random bytes are refused at once; a real id whose
 * rank 0 never comes times out. Either way a reason, *comm_p unwritten and
 * no descriptor left. */
static void test_bad_ids(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TIMEOUT", "1s");
    shoal_unique_id_t real;
    assert_int_equal(shoal_get_unique_id(&real), SHOAL_OK);
    int fds = harness_open_fds();
    shoal_comm_t comm = (shoal_comm_t)0x1;
    uint32_t x = (uint32_t)time(NULL);
    for (int i = 0; i < 20; i++) {
        shoal_unique_id_t junk;
        for (size_t j = 0; j < sizeof(junk.bytes); j++)
            junk.bytes[j] = (unsigned char)(x = harness_mix(x + (uint32_t)j));
        shoal_status_t s = shoal_comm_init(2, &junk, 1, &comm);
        assert_int_equal(s, SHOAL_ERR_INVALID_ARG);
        assert_non_null(strstr(shoal_comm_last_error(NULL), "not a shoal unique id"));
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    shoal_status_t s = shoal_comm_init(2, &real, 1, &comm);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    assert_int_equal(s, SHOAL_ERR_TIMEOUT);
    print_message("# rank 1 without rank 0: %s after %.2f s: %s\n", shoal_status_string(s), secs,
                  shoal_comm_last_error(NULL));
    assert_non_null(strstr(shoal_comm_last_error(NULL), "rank 1 of 2"));
    assert_true(secs < 10);
    assert_ptr_equal(comm, (shoal_comm_t)0x1);
    assert_int_equal(harness_open_fds(), fds);
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

/* The last rank believes the job has one rank more: rank 0 refuses it
 * (it learns why at once), and the others time out naming it. */
static int rank_disagree(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm = (shoal_comm_t)0x1;
    int fds = open_fds_of(rank, 1);
    int mine = rank == nranks - 1 ? nranks + 1 : nranks;
    shoal_status_t s = shoal_comm_init(mine, id, rank, &comm);
    const char *why = shoal_comm_last_error(NULL);
    RANK_CHECK(comm == (shoal_comm_t)0x1, fail, "rank %d: failed init wrote *comm_p", rank);
    if (mine != nranks) {
        RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "rank %d: got %s", rank,
                   shoal_status_string(s));
        RANK_CHECK(strstr(why, "number of ranks differs") != NULL, fail, "rank %d: reason: %s",
                   rank, why);
    } else {
        RANK_CHECK(s == SHOAL_ERR_TIMEOUT, fail, "rank %d: got %s", rank, shoal_status_string(s));
        RANK_CHECK(rank != 0 || strstr(why, "missing ranks") != NULL, fail, "rank 0: reason: %s",
                   why);
        RANK_CHECK(rank == 0 || strstr(why, "rank 0") != NULL, fail, "rank %d: reason: %s",
                   rank, why);
    }
    RANK_CHECK(harness_open_fds() == fds, fail, "rank %d: %d descriptors left", rank, harness_open_fds() - fds);
    (void)arg;
    return 0;
fail:
    return 1;
}

static void test_disagree_nranks(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TIMEOUT", "2s");
    assert_int_equal(harness_run_ranks(2, rank_disagree, NULL, 30), 0);
    assert_int_equal(harness_run_ranks(3, rank_disagree, NULL, 30), 0);
    harness_setenv("SHOAL_TIMEOUT", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix_shm),  cmocka_unit_test(test_matrix_tcp),
        cmocka_unit_test(test_aborted),     cmocka_unit_test(test_bad_ids),
        cmocka_unit_test(test_disagree_nranks), cmocka_unit_test(test_wait_in_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
