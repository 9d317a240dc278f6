/* Every schedule a compressed all-reduce can ask for (core/compress_call.h:
 * SHOAL_COMPRESS_ALGO_RING, TWO_SHOT, TREE, ..., found by asking the
 * schedule selector, shoal_codec_algo_select, for each value in turn until
 * it knows no more), through one matrix: the int8 codec (and the ternary
 * one where the schedule takes it), over shared memory and over tcp, rank
 * counts 1..8, counts 0, 1, 63, 64, 65, 1001 and several pipeline loops of
 * 4 KiB pieces (86861: 24 pieces, three windows of the trees), and a
 * multi-MB count with the default piece size; blocks of 32, 64 and 128,
 * nearest and stochastic rounding (one pair per count, turning with the
 * count and the rank count: cref_codec_wanted); each through the
 * reference check of compress_ref.h: bitwise the same result on every
 * rank and in place, within the schedule's error bound of a double
 * reference (compress_ref.h derives each), residuals that add up to the
 * error, AVG as SUM / n. The
 * ternary codec's shared scales are the max over ranks of each rank's
 * block maxima.
 *
 * And what belongs to one schedule or to the choice between them:
 * - the choice (shoal_codec_algo_select): AUTO is the ring on up to 8
 *   ranks of one host and the two-shot beyond, the ring for the ternary
 *   codec whatever the rank count, the hierarchical one across hosts
 *   (where some host holds several ranks; with one rank per host, what
 *   one host would get), and
 *   never the tree; a requested schedule is served on any shape; end to
 *   end, AUTO gives bitwise the result of the schedule it names on 3 and 9
 *   ranks;
 * - the ternary codec with the tree is SHOAL_ERR_INVALID_ARG on every
 *   rank, and the communicator stays usable;
 * - a compressed all-reduce against a plain one, and ranks whose codecs
 *   differ in rounding, block or schedule, fail with SHOAL_ERR_MISMATCH on
 *   some rank and never succeed or hang;
 * - bad arguments are SHOAL_ERR_INVALID_ARG and leave the communicator
 *   usable;
 * - the codec id of the signature changes with each setting it covers,
 *   and a signature prints it in place of a root.
 * The hierarchical schedule needs several hosts: test_netns_hosts.c runs
 * it. The dry simulator is not covered here yet. */
#include "compress_ref.h"

#include "algos/algo.h"
#include "core/comm.h"
#include "core/sig.h"

#include <sys/mman.h>

#define TEST_CHUNK 4096

/* The name of the schedule algo picks for codec ops on nranks ranks of
 * nhosts hosts, spread as evenly as they go (NULL for none); only the
 * fields the choice reads are set. */
static const char *chosen_for(shoal_coll_kind_t kind, const shoal_codec_ops_t *ops, int algo,
                              int nranks, int nhosts)
{
    static shoal_team_t team;
    shoal_codec_t c = {.ops = ops, .block = 64};
    team.nranks = nranks;
    team.nhosts = nhosts;
    team.cluster.max_local = (nranks + nhosts - 1) / nhosts;
    shoal_coll_args_t args = {.kind = kind, .count = 1000, .dtype = SHOAL_FLOAT32,
                              .op = SHOAL_SUM, .codec = &c, .codec_algo = algo};
    const shoal_algo_ops_t *a = shoal_codec_algo_select(&team, &args);
    return a ? a->name : NULL;
}

static const char *chosen(const shoal_codec_ops_t *ops, int algo, int nranks, int nhosts)
{
    return chosen_for(SHOAL_COLL_ALLREDUCE, ops, algo, nranks, nhosts);
}

/* What the matrix needs to know of a schedule, by name: which error bound
 * holds, and whether it takes the ternary codec. */
typedef struct {
    const char *name;
    cref_sched_t sched;
    int ternary;
} sched_facts_t;

static const sched_facts_t facts[] = {
    {"ring-codec", CREF_RING, 1},
    {"twoshot-codec", CREF_TWO_SHOT, 0},
    {"tree-codec", CREF_TREE, 0},
};

/* The schedules the selector serves when asked (AUTO aside), in order, as
 * matrices over counts; returns how many (at most max). Fails the test on a
 * schedule whose bound the matrix does not know. */
static int schedules(const size_t *counts, cref_matrix_t *m, int max)
{
    int n = 0;
    const char *name;
    for (int algo = SHOAL_COMPRESS_ALGO_AUTO + 1;
         (name = chosen(&shoal_codec_int8, algo, 2, 1)) != NULL; algo++) {
        size_t k = 0;
        while (k < sizeof(facts) / sizeof(facts[0]) && strcmp(facts[k].name, name))
            k++;
        if (k == sizeof(facts) / sizeof(facts[0]))
            fail_msg("schedule %d (%s): no error bound known to this test", algo, name);
        assert_true(n < max);
        m[n++] = (cref_matrix_t){.counts = counts, .algo = (shoal_compress_algo_t)algo,
                                 .sched = facts[k].sched, .ternary = facts[k].ternary};
    }
    assert_true(n >= 3); /* ring, two-shot and tree at least */
    return n;
}
#define MAX_SCHEDS 8

/* Several loops of 4 KiB pieces at 8 ranks: a piece holds 3616 values of
 * blocks of 32 (113 blocks of 36 B). */
static const size_t small_counts[] = {0, 1, 63, 64, 65, 1001, 3 * 8 * 3616 + 77, SIZE_MAX};

/* Every schedule over transport at rank counts from..8, one after another
 * on one communicator per rank count. */
static void run_matrix(const char *transport, int from)
{
    cref_matrix_t m[MAX_SCHEDS];
    cref_matrices_t ms = {.m = m, .n = schedules(small_counts, m, MAX_SCHEDS)};
    harness_use_transport(transport, TEST_CHUNK);
    for (int nranks = from; nranks <= 8; nranks++) {
        if (!harness_ranks_wanted(nranks))
            continue;
        int rc = harness_run_ranks(nranks, cref_rank_matrix, &ms, 600);
        if (rc != 0)
            print_error("the schedules over %s with %d ranks failed\n", transport, nranks);
        assert_int_equal(rc, 0);
    }
}

static void test_matrix_shm(void **state)
{
    (void)state;
    run_matrix("shm", 1);
}

static void test_matrix_tcp(void **state)
{
    (void)state;
    run_matrix("tcp", 2);
}

/* The default piece size, several loops of it (8 MB of values: three
 * windows of 128 KiB pieces over shared memory). */
static const size_t large_counts[] = {2000005, SIZE_MAX};

static void test_default_chunk(void **state)
{
    (void)state;
    cref_matrix_t m[MAX_SCHEDS];
    cref_matrices_t ms = {.m = m, .n = schedules(large_counts, m, MAX_SCHEDS)};
    harness_use_transport("shm", 0);
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    assert_int_equal(harness_run_ranks(3, cref_rank_matrix, &ms, 600), 0);
    harness_use_transport("tcp", 0);
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    assert_int_equal(harness_run_ranks(2, cref_rank_matrix, &ms, 600), 0);
}

/* The choice of schedule, on the selection function. */
static void test_select(void **state)
{
    (void)state;
    const shoal_codec_ops_t *i8 = &shoal_codec_int8, *tern = &shoal_codec_ternary;
    const int autoa = SHOAL_COMPRESS_ALGO_AUTO, ring = SHOAL_COMPRESS_ALGO_RING,
              two = SHOAL_COMPRESS_ALGO_TWO_SHOT, tree = SHOAL_COMPRESS_ALGO_TREE;
    assert_string_equal(chosen(i8, autoa, 1, 1), "ring-codec");
    assert_string_equal(chosen(i8, autoa, 8, 1), "ring-codec");
    assert_string_equal(chosen(i8, autoa, 9, 1), "twoshot-codec");
    assert_string_equal(chosen(i8, autoa, 64, 1), "twoshot-codec");
    assert_string_equal(chosen(tern, autoa, 64, 1), "ring-codec");
    assert_string_equal(chosen(i8, autoa, 4, 2), "hier-codec");
    assert_string_equal(chosen(tern, autoa, 16, 4), "hier-codec");
    assert_string_equal(chosen(i8, autoa, 5, 3), "hier-codec");
    /* One rank per host: the rails are the flat ring, chosen as on one
     * host. */
    assert_string_equal(chosen(i8, autoa, 2, 2), "ring-codec");
    assert_string_equal(chosen(i8, autoa, 8, 8), "ring-codec");
    assert_string_equal(chosen(i8, autoa, 9, 9), "twoshot-codec");
    assert_string_equal(chosen(tern, autoa, 16, 16), "ring-codec");
    assert_string_equal(chosen(i8, ring, 64, 4), "ring-codec");
    assert_string_equal(chosen(i8, two, 2, 1), "twoshot-codec");
    assert_string_equal(chosen(i8, two, 16, 4), "twoshot-codec");
    assert_null(chosen(i8, 7, 4, 1));
    /* The reduce-scatter: two-shot unless asked for the ring; across hosts
     * with several ranks on one, the hierarchy's, whose rails run the
     * two-shot; with one rank a host, the flat two-shot. */
    const shoal_coll_kind_t rs = SHOAL_COLL_REDUCE_SCATTER;
    const shoal_codec_ops_t *sign = &shoal_codec_sign, *i4 = &shoal_codec_int4;
    assert_string_equal(chosen_for(rs, i8, autoa, 8, 1), "twoshot-codec");
    assert_string_equal(chosen_for(rs, i8, autoa, 4, 4), "twoshot-codec");
    assert_string_equal(chosen_for(rs, i8, autoa, 4, 2), "hier-codec");
    assert_string_equal(chosen_for(rs, sign, autoa, 7, 3), "hier-codec");
    assert_string_equal(chosen_for(rs, i4, autoa, 16, 4), "hier-codec");
    assert_string_equal(chosen_for(rs, i8, two, 4, 2), "twoshot-codec");
    assert_string_equal(chosen_for(rs, i8, ring, 4, 2), "ring-codec");
    /* The all-gather's ring, wherever the compressor asks for it. */
    assert_string_equal(chosen_for(SHOAL_COLL_ALLGATHER, i8, autoa, 4, 1), "ring-codec");
    assert_string_equal(chosen_for(SHOAL_COLL_ALLGATHER, i4, autoa, 3, 3), "ring-codec");
    /* The tree when asked, on any shape; never by AUTO. */
    static const int shapes[][2] = {{1, 1}, {2, 1}, {8, 1}, {64, 1}, {16, 4}};
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        assert_string_equal(chosen(i8, tree, shapes[k][0], shapes[k][1]), "tree-codec");
        assert_string_not_equal(chosen(i8, autoa, shapes[k][0], shapes[k][1]), "tree-codec");
        assert_string_not_equal(chosen(tern, autoa, shapes[k][0], shapes[k][1]), "tree-codec");
    }
}

/* AUTO against the schedule it should pick on this rank count (arg):
 * bitwise the same results, and AVG too. */
static int rank_auto(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    shoal_compress_algo_t want = *(const shoal_compress_algo_t *)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = 20011;
    float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float)),
          *z = malloc(count * sizeof(float));
    RANK_CHECK(x && y && z, fail, "out of memory");
    for (size_t i = 0; i < count; i++)
        x[i] = cref_input(rank, i);
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 64, .round = SHOAL_ROUND_STOCHASTIC,
                       .seed = 7, .step = 3};
    for (int avg = 0; avg < 2; avg++) {
        shoal_op_t op = avg ? SHOAL_AVG : SHOAL_SUM;
        shoal_status_t s = shoal_allreduce_codec(comm, x, y, count, SHOAL_FLOAT32, op, &c,
                                                 NULL, SHOAL_COMPRESS_ALGO_AUTO);
        RANK_CHECK(s == SHOAL_OK, fail, "auto: %s (%s)", shoal_status_string(s),
                   shoal_comm_last_error(comm));
        s = shoal_allreduce_codec(comm, x, z, count, SHOAL_FLOAT32, op, &c, NULL, want);
        RANK_CHECK(s == SHOAL_OK, fail, "algo %d: %s", (int)want, shoal_status_string(s));
        RANK_CHECK(!memcmp(y, z, count * sizeof(float)), fail,
                   "rank %d/%d: AUTO differs from algo %d (%s)", rank, nranks, (int)want,
                   avg ? "avg" : "sum");
    }
    free(x);
    free(y);
    free(z);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_auto(void **state)
{
    (void)state;
    static const shoal_compress_algo_t ring = SHOAL_COMPRESS_ALGO_RING,
                                       two = SHOAL_COMPRESS_ALGO_TWO_SHOT;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(3, rank_auto, (void *)&ring, 120), 0);
    assert_int_equal(harness_run_ranks(9, rank_auto, (void *)&two, 120), 0);
}

/* The ternary codec with TREE is refused on every rank, and the
 * communicator stays usable for the tree with int8 and ternary's ring. */
static int rank_refuse(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    float x[100], y[100], res[100], scales[4] = {1, 1, 1, 1};
    for (int i = 0; i < 100; i++)
        x[i] = (float)(i + rank) / 100;
    shoal_codec_t tern = {.ops = &shoal_codec_ternary, .block = 32,
                          .round = SHOAL_ROUND_STOCHASTIC, .scales = scales};
    shoal_codec_t i8 = {.ops = &shoal_codec_int8, .block = 32, .round = SHOAL_ROUND_NEAREST};
    shoal_status_t s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &tern,
                                             res, SHOAL_COMPRESS_ALGO_TREE);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "rank %d: ternary tree gave %s", rank,
               shoal_status_string(s));
    const char *why = shoal_comm_last_error(comm);
    RANK_CHECK(why && strstr(why, "no tree schedule"), fail, "rank %d: ternary tree: '%s'", rank,
               why ? why : "(null)");
    s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &i8, res,
                              SHOAL_COMPRESS_ALGO_TREE);
    RANK_CHECK(s == SHOAL_OK, fail, "int8 tree after the refusal: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &tern, res,
                              SHOAL_COMPRESS_ALGO_RING);
    RANK_CHECK(s == SHOAL_OK, fail, "ternary ring after the refusal: %s", shoal_status_string(s));
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_ternary_refused(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(1, rank_refuse, NULL, 60), 0);
    assert_int_equal(harness_run_ranks(3, rank_refuse, NULL, 60), 0);
}

/* How rank 0's call differs from the others' in a mismatch case. */
enum { MIS_PLAIN, MIS_ROUND, MIS_BLOCK, MIS_ALGO, MIS_MODES };
static const char *const mis_names[MIS_MODES] = {"plain allreduce", "rounding", "block",
                                                  "algo"};

/* Shared with the ranks: the case, and each rank's status. */
typedef struct {
    int mode;
    int status[8];
} mismatch_t;

/* Rank 0 runs a plain all-reduce or a codec that differs from the others'
 * in one setting; each rank's status lands in shared memory for the
 * parent to look at. */
static int rank_mismatch(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    mismatch_t *m = arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    size_t count = 5000;
    float *x = calloc(count, sizeof(float)), *y = calloc(count, sizeof(float));
    RANK_CHECK(x && y, fail, "out of memory");
    for (size_t i = 0; i < count; i++)
        x[i] = cref_input(rank, i);
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 64, .round = SHOAL_ROUND_STOCHASTIC};
    shoal_compress_algo_t algo = SHOAL_COMPRESS_ALGO_RING;
    if (rank == 0 && m->mode == MIS_ROUND)
        c.round = SHOAL_ROUND_NEAREST;
    if (rank == 0 && m->mode == MIS_BLOCK)
        c.block = 32;
    if (rank == 0 && m->mode == MIS_ALGO)
        algo = SHOAL_COMPRESS_ALGO_TWO_SHOT;
    shoal_status_t s =
        rank == 0 && m->mode == MIS_PLAIN
            ? shoal_allreduce(x, y, count, SHOAL_FLOAT32, SHOAL_SUM, comm)
            : shoal_allreduce_codec(comm, x, y, count, SHOAL_FLOAT32, SHOAL_SUM, &c, NULL, algo);
    m->status[rank] = (int)s;
    free(x);
    free(y);
    shoal_comm_abort(comm);
    return 0;
fail:
    return 1;
}

static void run_mismatch(const char *transport, int nranks, int mode)
{
    mismatch_t *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
    assert_true(m != MAP_FAILED);
    m->mode = mode;
    for (int r = 0; r < 8; r++)
        m->status[r] = -1;
    harness_use_transport(transport, TEST_CHUNK);
    harness_setenv("SHOAL_TIMEOUT", "5s");
    assert_int_equal(harness_run_ranks(nranks, rank_mismatch, m, 60), 0);
    int mismatches = 0;
    for (int r = 0; r < nranks; r++) {
        if (m->status[r] == SHOAL_OK)
            fail_msg("%s, %d ranks, %s differs: rank %d succeeded", transport, nranks,
                     mis_names[mode], r);
        mismatches += m->status[r] == SHOAL_ERR_MISMATCH;
    }
    if (mismatches == 0)
        fail_msg("%s, %d ranks, %s differs: no rank saw a mismatch", transport, nranks,
                 mis_names[mode]);
    munmap(m, sizeof(*m));
}

/* A plain all-reduce against a compressed one, and compressed ones whose
 * codecs differ in rounding, block or schedule (the codec id in their
 * signatures). */
static void test_mismatch(void **state)
{
    (void)state;
    for (int mode = 0; mode < MIS_MODES; mode++) {
        run_mismatch("shm", 2, mode);
        run_mismatch("shm", 3, mode);
        run_mismatch("tcp", 2, mode);
        run_mismatch("tcp", 3, mode);
    }
}

/* The codec id: a function of exactly the settings it covers; printed as
 * a codec, whatever its top bit. */
static void test_sig_codec_id(void **state)
{
    (void)state;
    uint32_t id = shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 8, 1);
    assert_int_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 8, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("ternary", 64, SHOAL_ROUND_NEAREST, 8, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 32, SHOAL_ROUND_NEAREST, 8, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_STOCHASTIC, 8, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 16, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 4, 1));
    assert_int_not_equal(id, shoal_sig_codec_id("int8", 64, SHOAL_ROUND_NEAREST, 8, 2));
    char buf[SHOAL_SIG_STR_MAX];
    shoal_sig_t sig = {.seq = 3, .count = 100, .kind = SHOAL_SIG_ALLREDUCE_CODEC,
                       .dtype = SHOAL_FLOAT32, .op = SHOAL_AVG, .root = 0x1234abcd};
    assert_string_equal(shoal_sig_format(&sig, buf, sizeof(buf)),
                        "compressed allreduce #3 of 100 x float avg codec 1234abcd");
    sig.root = (int32_t)0xfedcba98u;
    assert_string_equal(shoal_sig_format(&sig, buf, sizeof(buf)),
                        "compressed allreduce #3 of 100 x float avg codec fedcba98");
}

static int rank_bad_args(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(nranks, id, rank, &comm) == SHOAL_OK, fail, "init");
    float x[100], y[100], res[100];
    double d[100];
    for (int i = 0; i < 100; i++)
        x[i] = (float)(i + rank);
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 32, .round = SHOAL_ROUND_NEAREST};
    shoal_codec_t bad_block = c, bad_round = c, tern = c;
    bad_block.block = 48;
    bad_round.round = (shoal_round_t)7;
    float scales[4] = {1, 1, 1, 1};
    tern.ops = &shoal_codec_ternary;
    tern.scales = scales;
    const shoal_compress_algo_t ring = SHOAL_COMPRESS_ALGO_RING;
    struct {
        const char *what;
        shoal_status_t s;
    } cases[] = {
        {"float64", shoal_allreduce_codec(comm, d, d, 100, SHOAL_FLOAT64, SHOAL_SUM, &c, NULL,
                                          ring)},
        {"int32", shoal_allreduce_codec(comm, x, y, 100, SHOAL_INT32, SHOAL_SUM, &c, NULL, ring)},
        {"max", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_MAX, &c, NULL, ring)},
        {"prod", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_PROD, &c, NULL,
                                       ring)},
        {"block 48", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                           &bad_block, NULL, ring)},
        {"round 7", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                          &bad_round, NULL, ring)},
        {"NULL codec", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, NULL,
                                             NULL, ring)},
        {"residual = recvbuf", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                                     &c, y, ring)},
        {"NULL sendbuf", shoal_allreduce_codec(comm, NULL, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c,
                                               NULL, ring)},
        {"algo 7", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c, NULL,
                                         (shoal_compress_algo_t)7)},
        {"algo -1", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c, NULL,
                                          (shoal_compress_algo_t)-1)},
        {"ternary two-shot", shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM,
                                                   &tern, NULL, SHOAL_COMPRESS_ALGO_TWO_SHOT)},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        RANK_CHECK(cases[k].s == SHOAL_ERR_INVALID_ARG, fail, "rank %d: %s gave %s", rank,
                   cases[k].what, shoal_status_string(cases[k].s));
    /* Still usable: good calls of every schedule, and a plain one. */
    shoal_status_t s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c, res,
                                             ring);
    RANK_CHECK(s == SHOAL_OK, fail, "good call after bad ones: %s (%s)", shoal_status_string(s),
               shoal_comm_last_error(comm));
    s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &c, res,
                              SHOAL_COMPRESS_ALGO_TWO_SHOT);
    RANK_CHECK(s == SHOAL_OK, fail, "two-shot after bad ones: %s", shoal_status_string(s));
    s = shoal_allreduce_codec(comm, x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, &tern, res,
                              SHOAL_COMPRESS_ALGO_AUTO);
    RANK_CHECK(s == SHOAL_OK, fail, "ternary auto after bad ones: %s", shoal_status_string(s));
    s = shoal_allreduce(x, y, 100, SHOAL_FLOAT32, SHOAL_SUM, comm);
    RANK_CHECK(s == SHOAL_OK, fail, "plain call after bad ones: %s", shoal_status_string(s));
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_bad_args(void **state)
{
    (void)state;
    harness_use_transport("shm", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(1, rank_bad_args, NULL, 60), 0);
    assert_int_equal(harness_run_ranks(3, rank_bad_args, NULL, 60), 0);
    harness_use_transport("tcp", TEST_CHUNK);
    assert_int_equal(harness_run_ranks(2, rank_bad_args, NULL, 60), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sig_codec_id),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_ternary_refused),
        cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_matrix_shm),
        cmocka_unit_test(test_matrix_tcp),
        cmocka_unit_test(test_default_chunk),
    };
    return cmocka_run_group_tests_name("compress_algos", tests, NULL, NULL);
}
