/* Algorithm selection through the public API: every algorithm of every
 * collective, forced with SHOAL_ALGO=coll:name, must give the reference
 * result (every dtype x op where the collective reduces) for rank counts
 * 1..8 and counts 0, 1, odd and several pieces, over shared memory; a few
 * over tcp. The lists come from the library itself (shoal_algo_at), so a
 * new algorithm is tested as soon as it is registered. After every call
 * the communicator's flight recorder says which algorithm ran: the forced
 * one whenever its cost says it can serve the call, and the cost model's
 * choice only where it says it cannot; over shared memory with two ranks
 * or more, every algorithm must serve some of the calls. Unknown names
 * fail at init. */
#include "harness.h"

#include "algos/algo.h"
#include "base/dtype.h"
#include "core/comm.h"
#include "core/flight.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096

static const size_t counts[] = {0, 1, 19, 2 * TEST_CHUNK + 7};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

/* What a rank body tests: the collective and the algorithm that
 * SHOAL_ALGO forces for it (a run of rank_kind: each of the kind's in
 * turn), and whether that algorithm must serve at least one of the
 * calls. */
typedef struct {
    shoal_coll_kind_t kind;
    const char *algo;
    int must_run;
} forced_t;

static int32_t val(int rank, size_t i, int salt)
{
    return (int32_t)(harness_mix((uint32_t)rank * 7919u + (uint32_t)i * 31u + (uint32_t)salt) &
                     0xffffff);
}

/* The newest operation of comm, as its flight recorder noted it when the
 * operation started: the record reads "#N call of B: signature, ALGO,
 * done in ..." (core/flight.h; without the signature for a group's sends
 * and receives). *id_p gets N (0 when there is no record yet) and name
 * (cap bytes) ALGO; 0 on success, 1 when the newest record is not of that
 * form. */
static int last_record(shoal_comm_t comm, unsigned long long *id_p, char *name, size_t cap)
{
    /* The text holds times, which may take more digits from one call to
     * the next: room to spare, and a second try if that was not enough. */
    size_t cap_text = shoal_flight_format(comm->flight, NULL, 0) + 256, len;
    char *text = malloc(cap_text);
    int rc = 1;
    *id_p = 0;
    if (!text)
        goto out;
    len = shoal_flight_format(comm->flight, text, cap_text);
    if (len >= cap_text) {
        char *more = realloc(text, len + 256);
        if (!more)
            goto out;
        text = more;
        cap_text = len + 256;
        len = shoal_flight_format(comm->flight, text, cap_text);
        if (len >= cap_text)
            goto out;
    }
    if (len == 0) {
        rc = 0;
        goto out;
    }
    if (text[len - 1] == '\n')
        text[len - 1] = '\0';
    char *line = strrchr(text, '\n');
    line = line ? line + 1 : text;
    char *state = strstr(line, ", done in ");
    if (sscanf(line, "#%llu ", id_p) != 1 || !state)
        goto out;
    *state = '\0';
    char *algo = line + strlen(line);
    while (algo > line && algo[-1] != ',' && algo[-1] != ':')
        algo--;
    if (algo == line || algo[0] != ' ' || strlen(algo + 1) >= cap)
        goto out;
    algo++;
    strcpy(name, algo);
    rc = 0;
out:
    free(text);
    return rc;
}

/* In this rank's process: the flight record that check_ran saw last, and
 * how many calls ran the forced algorithm. */
static unsigned long long seen_record;
static int forced_runs;

/* After a call described by args (as the algorithms see it) that returned
 * SHOAL_OK: the algorithm that ran. Every call that moves something runs
 * an operation; one that moves nothing may finish without. A call of the
 * forced collective (a receive counts as the send's) must run the forced
 * algorithm exactly when the algorithm's cost says it can serve the call
 * (SHOAL_ALGO's contract); otherwise the cost model's choice runs. A call
 * of another collective is the cost model's, and not checked. */
static int check_ran(shoal_comm_t comm, const forced_t *f, const shoal_coll_args_t *args)
{
    shoal_coll_kind_t kind = args->kind == SHOAL_COLL_RECV ? SHOAL_COLL_SEND : args->kind;
    char ran[64];
    unsigned long long id;
    RANK_CHECK(last_record(comm, &id, ran, sizeof(ran)) == 0, fail,
               "%s of %zu: the flight recorder's newest record names no algorithm",
               shoal_coll_kind_name(args->kind), args->count);
    int new_record = id != seen_record;
    seen_record = id;
    size_t moved = args->count;
    if (args->sendcounts) {
        int n;
        RANK_CHECK(shoal_comm_size(comm, &n) == SHOAL_OK, fail, "shoal_comm_size");
        moved = 0;
        for (int j = 0; j < n; j++)
            moved += args->sendcounts[j] + args->recvcounts[j];
    }
    RANK_CHECK(new_record || moved == 0, fail, "%s of %zu ran no operation",
               shoal_coll_kind_name(args->kind), args->count);
    if (!new_record || kind != f->kind)
        return 0;
    const shoal_algo_ops_t *a = shoal_algo_find(kind, f->algo);
    RANK_CHECK(a != NULL, fail, "no %s algorithm %s", shoal_coll_kind_name(kind), f->algo);
    if (a->cost(&comm->team, args) >= 0) {
        RANK_CHECK(strcmp(ran, f->algo) == 0, fail,
                   "SHOAL_ALGO=%s:%s, but %s of %zu x %s ran %s", shoal_coll_kind_name(kind),
                   f->algo, shoal_coll_kind_name(args->kind), args->count,
                   shoal_dtype_name(args->dtype), ran);
        forced_runs++;
    } else {
        RANK_CHECK(strcmp(ran, f->algo) != 0, fail,
                   "%s ran %s of %zu x %s, which its cost says it cannot serve", f->algo,
                   shoal_coll_kind_name(args->kind), args->count, shoal_dtype_name(args->dtype));
    }
    return 0;
fail:
    return 1;
}

/* Reducing kinds: every dtype at the k-th count, exact reference (a short
 * run, harness_quick: one type of each element size), the op turning with
 * the count and the rank count (test_algos and test_reduce check every
 * dtype x op; here the choice is what is checked). */
static int check_reducing(shoal_comm_t comm, const forced_t *f, int rank, int n, size_t k)
{
    shoal_coll_kind_t kind = f->kind;
    size_t c = counts[k];
    shoal_dtype_t dts[SHOAL_DTYPE_COUNT];
    int ndt = harness_dtypes(dts);
    for (int t = 0; t < ndt; t++) {
        shoal_dtype_t dt = dts[t];
        shoal_op_t op = (shoal_op_t)(((int)dt + (int)k + n) % SHOAL_OP_COUNT);
        size_t es = shoal_dtype_bytes(dt), total = c * (size_t)n;
        size_t in_n = kind == SHOAL_COLL_REDUCE_SCATTER ? total : c;
        unsigned char *in = malloc(in_n * es + 1), *out = malloc(in_n * es + 1),
                      *want = malloc(in_n * es + 1), *tmp = malloc(in_n * es + 1);
        harness_fill_exact(in, in_n, rank, dt, op);
        harness_expected(want, tmp, in_n, n, dt, op);
        shoal_status_t s;
        size_t off = 0, len = c;
        shoal_coll_args_t args = {.kind = kind, .sendbuf = in, .recvbuf = out, .count = c,
                                  .dtype = dt, .op = op};
        if (kind == SHOAL_COLL_ALLREDUCE) {
            s = shoal_allreduce(in, out, c, dt, op, comm);
        } else if (kind == SHOAL_COLL_REDUCE_SCATTER) {
            s = shoal_reduce_scatter(in, out, c, dt, op, comm);
            off = (size_t)rank * c;
        } else {
            args.root = (int)(c % (size_t)n);
            s = shoal_reduce(in, out, c, dt, op, args.root, comm);
            if (rank != args.root)
                len = 0;
        }
        RANK_CHECK(s == SHOAL_OK, fail, "%s %s %s count %zu: %s (%s)",
                   shoal_coll_kind_name(kind), shoal_dtype_name(dt), shoal_op_name(op), c,
                   shoal_status_string(s), shoal_comm_last_error(comm));
        RANK_CHECK(!memcmp(out, want + off * es, len * es), fail,
                   "%s %s %s count %zu on rank %d/%d: wrong result",
                   shoal_coll_kind_name(kind), shoal_dtype_name(dt), shoal_op_name(op), c,
                   rank, n);
        if (check_ran(comm, f, &args))
            goto fail;
        free(in);
        free(out);
        free(want);
        free(tmp);
    }
    return 0;
fail:
    return 1;
}

/* Moving kinds: int32 payloads that name their source, destination and
 * index. */
static int check_moving(shoal_comm_t comm, const forced_t *f, int rank, int n, size_t c)
{
    shoal_coll_kind_t kind = f->kind;
    size_t total = c * (size_t)n;
    int32_t *in = calloc(total + 1, 4), *out = malloc(total * 4 + 4);
    int root = (int)(c % (size_t)n);
    shoal_status_t s = SHOAL_OK;
    /* The call as the algorithms see it, for check_ran; the rooted kinds
     * and point-to-point set their root or peer below. */
    shoal_coll_args_t args = {.kind = kind, .sendbuf = in, .recvbuf = out, .count = c,
                              .dtype = SHOAL_INT32, .op = SHOAL_SUM};
    int called = 1;
    memset(out, 0xee, total * 4 + 4);
    switch (kind) {
    case SHOAL_COLL_ALLGATHER:
        for (size_t i = 0; i < c; i++)
            in[i] = val(rank, i, 1);
        s = shoal_allgather(in, out, c, SHOAL_INT32, comm);
        for (int r = 0; r < n && s == SHOAL_OK; r++)
            for (size_t i = 0; i < c; i++)
                RANK_CHECK(out[(size_t)r * c + i] == val(r, i, 1), fail, "allgather [%d][%zu]", r,
                           i);
        break;
    case SHOAL_COLL_BROADCAST:
        for (size_t i = 0; i < c; i++)
            in[i] = val(root, i, 2);
        args.root = root;
        s = shoal_broadcast(in, out, c, SHOAL_INT32, root, comm);
        for (size_t i = 0; i < c && s == SHOAL_OK; i++)
            RANK_CHECK(out[i] == val(root, i, 2), fail, "broadcast [%zu]", i);
        break;
    case SHOAL_COLL_ALLTOALL:
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < c; i++)
                in[(size_t)r * c + i] = val(rank * 100 + r, i, 3);
        s = shoal_alltoall(in, out, c, SHOAL_INT32, comm);
        for (int r = 0; r < n && s == SHOAL_OK; r++)
            for (size_t i = 0; i < c; i++)
                RANK_CHECK(out[(size_t)r * c + i] == val(r * 100 + rank, i, 3), fail,
                           "alltoall [%d][%zu]", r, i);
        break;
    case SHOAL_COLL_ALLTOALLV: {
        /* Rank j gets (rank + j) % 3 * c / 2 elements from this rank,
         * blocks laid out in reverse order with gaps. */
        size_t sc[8], sd[8], rc[8], rd[8], so = 0, ro = 0;
        for (int j = n - 1; j >= 0; j--) {
            sc[j] = (size_t)((rank + j) % 3) * c / 2;
            rc[j] = (size_t)((j + rank) % 3) * c / 2;
            sd[j] = so;
            rd[j] = ro;
            so += sc[j] + 1;
            ro += rc[j] + 2;
        }
        int32_t *vin = calloc(so + 1, 4), *vout = malloc(ro * 4 + 4);
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < sc[j]; i++)
                vin[sd[j] + i] = val(rank * 100 + j, i, 4);
        s = shoal_alltoallv(vin, sc, sd, vout, rc, rd, SHOAL_INT32, comm);
        for (int j = 0; j < n && s == SHOAL_OK; j++)
            for (size_t i = 0; i < rc[j]; i++)
                RANK_CHECK(vout[rd[j] + i] == val(j * 100 + rank, i, 4), fail,
                           "alltoallv [%d][%zu]", j, i);
        args.sendbuf = vin;
        args.recvbuf = vout;
        args.sendcounts = sc;
        args.sdispls = sd;
        args.recvcounts = rc;
        args.rdispls = rd;
        if (s == SHOAL_OK && check_ran(comm, f, &args))
            goto fail;
        called = 0; /* checked here, while the counts are in scope */
        free(vin);
        free(vout);
        break;
    }
    case SHOAL_COLL_GATHER:
        for (size_t i = 0; i < c; i++)
            in[i] = val(rank, i, 5);
        args.root = root;
        s = shoal_gather(in, out, c, SHOAL_INT32, root, comm);
        for (int r = 0; r < n && s == SHOAL_OK && rank == root; r++)
            for (size_t i = 0; i < c; i++)
                RANK_CHECK(out[(size_t)r * c + i] == val(r, i, 5), fail, "gather [%d][%zu]", r, i);
        break;
    case SHOAL_COLL_SCATTER:
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < c; i++)
                in[(size_t)r * c + i] = val(r, i, 6);
        args.root = root;
        s = shoal_scatter(in, out, c, SHOAL_INT32, root, comm);
        for (size_t i = 0; i < c && s == SHOAL_OK; i++)
            RANK_CHECK(out[i] == val(rank, i, 6), fail, "scatter [%zu]", i);
        break;
    case SHOAL_COLL_SEND:
    case SHOAL_COLL_RECV:
        /* Around the ring: even ranks send first, odd ones receive first. */
        called = n > 1;
        if (n == 1)
            break;
        args.root = (rank + n - 1) % n; /* the last call of either order */
        for (size_t i = 0; i < c; i++)
            in[i] = val(rank, i, 7);
        if (rank % 2 == 0) {
            s = shoal_send(in, c, SHOAL_INT32, (rank + 1) % n, comm);
            if (s == SHOAL_OK)
                s = shoal_recv(out, c, SHOAL_INT32, (rank + n - 1) % n, comm);
        } else {
            s = shoal_recv(out, c, SHOAL_INT32, (rank + n - 1) % n, comm);
            if (s == SHOAL_OK)
                s = shoal_send(in, c, SHOAL_INT32, (rank + 1) % n, comm);
        }
        for (size_t i = 0; i < c && s == SHOAL_OK; i++)
            RANK_CHECK(out[i] == val((rank + n - 1) % n, i, 7), fail, "recv [%zu]", i);
        break;
    default:
        called = 0;
        break;
    }
    RANK_CHECK(s == SHOAL_OK, fail, "%s count %zu: %s (%s)", shoal_coll_kind_name(kind), c,
               shoal_status_string(s), shoal_comm_last_error(comm));
    if (called && check_ran(comm, f, &args))
        goto fail;
    free(in);
    free(out);
    return 0;
fail:
    return 1;
}

/* The calls of one forced algorithm on comm. */
static int forced_calls(shoal_comm_t comm, const forced_t *f, int rank, int n)
{
    shoal_coll_kind_t kind = f->kind;
    char ran[64];
    forced_runs = 0;
    /* The calls before (the last algorithm's) are not this one's. */
    RANK_CHECK(last_record(comm, &seen_record, ran, sizeof(ran)) == 0, fail,
               "the flight recorder's newest record names no algorithm");
    for (size_t k = 0; k < NCOUNTS; k++) {
        int reducing = kind == SHOAL_COLL_ALLREDUCE || kind == SHOAL_COLL_REDUCE_SCATTER ||
                       kind == SHOAL_COLL_REDUCE;
        /* Every dtype x op at every count, several pieces included. */
        if (reducing && check_reducing(comm, f, rank, n, k))
            return 1;
        if (!reducing && check_moving(comm, f, rank, n, counts[k]))
            return 1;
    }
    if (kind == SHOAL_COLL_ALLREDUCE) {
        /* Several pieces: all ranks must agree bitwise on a float sum. */
        size_t c = 3 * TEST_CHUNK + 1;
        float *in = malloc(c * 4), *out = malloc(c * 4), *root = malloc(c * 4);
        for (size_t i = 0; i < c; i++)
            in[i] = (float)val(rank, i, 8) * 1e-3f + 0.1f / (float)(rank + 1);
        RANK_CHECK(shoal_allreduce(in, out, c, SHOAL_FLOAT32, SHOAL_SUM, comm) == SHOAL_OK, fail,
                   "float allreduce");
        shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = in, .recvbuf = out,
                                  .count = c, .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM};
        if (check_ran(comm, f, &args))
            goto fail;
        memcpy(root, out, c * 4);
        RANK_CHECK(shoal_broadcast(root, root, c, SHOAL_FLOAT32, 0, comm) == SHOAL_OK, fail,
                   "bcast");
        RANK_CHECK(!memcmp(root, out, c * 4), fail, "rank %d's float sum differs from rank 0's",
                   rank);
        free(in);
        free(out);
        free(root);
    }
    RANK_CHECK(!f->must_run || forced_runs > 0, fail, "%s never ran %s", f->algo,
               shoal_coll_kind_name(kind));
    return 0;
fail:
    return 1;
}

/* Every algorithm of a kind forced in turn (SHOAL_ALGO=kind:name, which
 * each call reads), all on one communicator. */
static int rank_kind(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    const forced_t *run = arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(n, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    const shoal_algo_ops_t *a;
    for (int i = 0; (a = shoal_algo_at(run->kind, i)); i++) {
        char setting[128];
        snprintf(setting, sizeof(setting), "%s:%s", shoal_coll_kind_name(run->kind), a->name);
        harness_setenv("SHOAL_ALGO", setting);
        forced_t f = {.kind = run->kind, .algo = a->name, .must_run = run->must_run};
        RANK_CHECK(forced_calls(comm, &f, rank, n) == 0, fail, "rank %d/%d: SHOAL_ALGO=%s failed",
                   rank, n, setting);
    }
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void run_forced(shoal_coll_kind_t kind, const char *tl, int n)
{
    harness_setenv("SHOAL_SHM_ENABLE", strcmp(tl, "shm") ? "n" : "y");
    /* On one host over shared memory every algorithm can serve some call
     * of the matrix once there are peers: one that never runs there has
     * lost its place in the selection. */
    forced_t run = {.kind = kind, .must_run = !strcmp(tl, "shm") && n >= 2};
    int rc = harness_run_ranks(n, rank_kind, &run, 120);
    if (rc != 0)
        print_error("%s's algorithms over %s with %d ranks failed\n",
                    shoal_coll_kind_name(kind), tl, n);
    assert_int_equal(rc, 0);
}

static void setup_env(void)
{
    char chunk[32];
    snprintf(chunk, sizeof(chunk), "%d", TEST_CHUNK);
    harness_setenv("SHOAL_CHUNK_SIZE", chunk);
    harness_setenv("SHOAL_TIMEOUT", "20s");
}

/* Every registered algorithm of every collective, ranks 1..8, shm. */
static void test_every_algorithm_shm(void **state)
{
    (void)state;
    setup_env();
    for (int k = 0; k < SHOAL_COLL_KIND_COUNT; k++) {
        if (k == SHOAL_COLL_RECV)
            continue; /* send and recv share their algorithm and test */
        for (int n = 1; n <= 8; n++)
            if (harness_ranks_wanted(n))
                run_forced((shoal_coll_kind_t)k, "shm", n);
    }
    harness_setenv("SHOAL_ALGO", NULL);
}

/* The same over tcp, at 3 and 4 ranks. */
static void test_every_algorithm_tcp(void **state)
{
    (void)state;
    setup_env();
    for (int k = 0; k < SHOAL_COLL_KIND_COUNT; k++) {
        if (k == SHOAL_COLL_RECV)
            continue;
        for (int n = 3; n <= 4; n++)
            run_forced((shoal_coll_kind_t)k, "tcp", n);
    }
    harness_setenv("SHOAL_ALGO", NULL);
    harness_setenv("SHOAL_SHM_ENABLE", NULL);
}

static int rank_init_fails(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(n, id, rank, &comm);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "init with SHOAL_ALGO=%s: %s", (const char *)arg,
               shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static void test_bad_setting(void **state)
{
    (void)state;
    static const char *const bad[] = {"bogus", "allreduce:chain", "nosuchcoll:ring",
                                      "allreduce:ring,broadcast:nope", "allreduce:"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        harness_setenv("SHOAL_ALGO", bad[i]);
        assert_int_equal(shoal_algo_check_setting(), SHOAL_ERR_INVALID_ARG);
        assert_int_equal(harness_run_ranks(1, rank_init_fails, (void *)bad[i], 30), 0);
    }
    static const char *const good[] = {"auto", "ring", "allreduce:ring,broadcast:chain",
                                       "all:ring", "allreduce:auto"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        harness_setenv("SHOAL_ALGO", good[i]);
        assert_int_equal(shoal_algo_check_setting(), SHOAL_OK);
    }
    harness_setenv("SHOAL_ALGO", NULL);
}

/* A communicator for the cost model alone: 8 ranks on one host, 2 us and
 * 10 GB/s links, nothing connected. */
static void fake_comm(shoal_team_t *comm)
{
    memset(comm, 0, sizeof(*comm));
    comm->nranks = 8;
    comm->nhosts = 1;
    comm->chunk_size = 128 << 10;
    comm->cost.link_lat_s = 2e-6;
    comm->cost.link_bw_Bps = 10e9;
}

/* The selection itself: a bare name forces every collective that has it;
 * the cost model prefers few steps for tiny messages and the ring for
 * large ones (where it has a choice). */
static void test_select_rules(void **state)
{
    (void)state;
    shoal_team_t comm;
    fake_comm(&comm);
    shoal_coll_args_t big = {.kind = SHOAL_COLL_ALLREDUCE, .count = 64 << 20,
                             .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM};
    harness_setenv("SHOAL_ALGO", "auto");
    const shoal_algo_ops_t *a = shoal_algo_select(&comm, &big);
    assert_non_null(a);
    assert_string_equal(a->name, "ring");
    harness_setenv("SHOAL_ALGO", "ring");
    shoal_coll_args_t bc = {.kind = SHOAL_COLL_BROADCAST, .count = 4, .dtype = SHOAL_INT8};
    a = shoal_algo_select(&comm, &bc);
    assert_non_null(a); /* no ring broadcast: the cost model's choice */
    harness_setenv("SHOAL_ALGO", "allreduce:ring");
    shoal_coll_args_t small = big;
    small.count = 1;
    a = shoal_algo_select(&comm, &small);
    assert_string_equal(a->name, "ring");
    harness_setenv("SHOAL_ALGO", NULL);
    a = shoal_algo_select(&comm, &small);
    assert_non_null(a);
    if (shoal_algo_find(SHOAL_COLL_ALLREDUCE, "oneshot") ||
        shoal_algo_find(SHOAL_COLL_ALLREDUCE, "tree"))
        assert_string_not_equal(a->name, "ring");
}

/* The communicator's memo of the last choice: a repeated call gets the
 * choice the cost model would make, a call with other arguments or after
 * the settings change is chosen afresh, and a stale memo is never used. */
static void test_choice_memo(void **state)
{
    (void)state;
    shoal_team_t comm;
    fake_comm(&comm);
    harness_setenv("SHOAL_ALGO", NULL);
    shoal_coll_args_t big = {.kind = SHOAL_COLL_ALLREDUCE, .count = 64 << 20,
                             .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM};
    shoal_coll_args_t small = big;
    small.count = 1;
    const shoal_algo_ops_t *want_big = shoal_algo_select(&comm, &big);
    const shoal_algo_ops_t *want_small = shoal_algo_select(&comm, &small);
    assert_ptr_not_equal(want_big, want_small);
    for (int i = 0; i < 3; i++) {
        assert_ptr_equal(shoal_algo_choose(&comm, &big), want_big);
        assert_ptr_equal(comm.memo[SHOAL_COLL_ALLREDUCE].algo, want_big);
        assert_ptr_equal(shoal_algo_choose(&comm, &small), want_small);
    }
    /* A memo planted by hand stands for a repeated call... */
    comm.memo[SHOAL_COLL_ALLREDUCE].algo = want_big;
    assert_ptr_equal(shoal_algo_choose(&comm, &small), want_big);
    /* ...but not for other arguments, nor after the settings change. */
    shoal_coll_args_t other = small;
    other.dtype = SHOAL_FLOAT64;
    assert_ptr_equal(shoal_algo_choose(&comm, &other), shoal_algo_select(&comm, &other));
    comm.memo[SHOAL_COLL_ALLREDUCE].algo = want_big;
    harness_setenv("SHOAL_ALGO", "allreduce:tree");
    const shoal_algo_ops_t *tree = shoal_algo_find(SHOAL_COLL_ALLREDUCE, "tree");
    assert_non_null(tree);
    assert_ptr_equal(shoal_algo_choose(&comm, &other), tree);
    harness_setenv("SHOAL_ALGO", NULL);
    assert_ptr_equal(shoal_algo_choose(&comm, &other), shoal_algo_select(&comm, &other));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_setting),
        cmocka_unit_test(test_select_rules),
        cmocka_unit_test(test_choice_memo),
        cmocka_unit_test(test_every_algorithm_shm),
        cmocka_unit_test(test_every_algorithm_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
