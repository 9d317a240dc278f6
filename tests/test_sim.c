/* The simulator (src/sim/): every schedule of every collective runs dry to
 * its end on made-up clusters of 1..8 ranks and 64 ranks, without touching
 * a byte of its buffers (they are mapped without access, so a copy the dry
 * mode missed faults); the clocks follow the documented cost rules exactly
 * on a stream of pieces between two ranks; a ring moves the bytes its
 * schedule says and approaches the bound of the links between hosts; a
 * deadlocked schedule is an error naming the ranks, not a hang; the
 * cost model's choice stays near the best schedule the simulator finds;
 * and the compressed all-reduces (every codec schedule, int8 and ternary)
 * run dry on the same clusters, moving exactly the wire bytes their
 * schedules say; and tcp's memory per rank, connected lazily, follows
 * the peers each schedule touches (two for the ring at any scale, log2 n
 * for halving-doubling, all for all-to-all) and tcp's slot rule. */
#include "harness.h"

#include "algos/algo.h"
#include "base/config.h"
#include "base/dtype.h"
#include "sim/sim.h"
#include "transport/transport.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TEST_CHUNK 4096

static shoal_sim_t *make_sim(int nhosts, int per_host, int numa, size_t chunk,
                             const char *links)
{
    shoal_sim_config_t cfg;
    assert_int_equal(shoal_sim_config_init(&cfg, nhosts, per_host), SHOAL_OK);
    if (links)
        assert_int_equal(shoal_links_parse(links, &cfg.links), SHOAL_OK);
    cfg.numa_per_host = numa;
    cfg.chunk_size = chunk;
    shoal_sim_t *sim = NULL;
    assert_int_equal(shoal_sim_create(&cfg, &sim), SHOAL_OK);
    return sim;
}

/* Every algorithm of every collective the simulator runs, for rank counts
 * 1..8 (hosts x ranks, uneven splits of hosts too), counts 0, 1, odd and
 * several pieces. */
static void test_every_schedule(void **state)
{
    (void)state;
    static const int shapes[][3] = {{1, 1, 0}, {1, 2, 0}, {3, 1, 0}, {2, 2, 0}, {5, 1, 0},
                                    {3, 2, 0}, {7, 1, 0}, {2, 4, 2}, {4, 2, 0}, {1, 6, 2}};
    static const size_t counts[] = {0, 1, 19, 2 * TEST_CHUNK / 4 + 7};
    for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
        shoal_sim_t *sim = make_sim(shapes[sh][0], shapes[sh][1], shapes[sh][2], TEST_CHUNK,
                                    NULL);
        int n = shoal_sim_nranks(sim);
        for (int k = 0; k < SHOAL_COLL_SEND; k++) {
            if (k == SHOAL_COLL_ALLTOALLV)
                continue;
            for (int i = 0; shoal_algo_at((shoal_coll_kind_t)k, i); i++) {
                const shoal_algo_ops_t *a = shoal_algo_at((shoal_coll_kind_t)k, i);
                for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                    shoal_coll_args_t args = {.kind = (shoal_coll_kind_t)k,
                                              .count = counts[ci], .dtype = SHOAL_FLOAT32,
                                              .op = SHOAL_SUM};
                    if (a->cost(shoal_sim_team(sim, 0), &args) < 0)
                        continue;
                    double t = -1;
                    shoal_status_t s = shoal_sim_run(sim, (shoal_coll_kind_t)k, counts[ci],
                                                     SHOAL_FLOAT32, a, &t, NULL);
                    if (s != SHOAL_OK || t < 0 || (n > 1 && counts[ci] > 0 && t <= 0))
                        fail_msg("%d x %d ranks: %s %s count %zu: %s, %g s", shapes[sh][0],
                                 shapes[sh][1], shoal_coll_kind_name((shoal_coll_kind_t)k),
                                 a->name, counts[ci], shoal_status_string(s), t);
                }
            }
        }
        shoal_sim_destroy(sim);
    }
}

/* A made-up algorithm: rank 0 streams count elements to rank 1 in pieces
 * (or, with deadlock, both ranks wait to receive first). */
static int deadlock;

static double stream_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    (void)team, (void)args;
    return 0;
}

static shoal_status_t stream_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                  shoal_plan_t *plan)
{
    return shoal_plan_init(team, args, 0, plan);
}

static shoal_status_t stream_run(shoal_plan_t *plan)
{
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    int me = team->rank;
    if (me > 1)
        return SHOAL_OK;
    p->deadline_ns = UINT64_MAX;
    p->send_ep = me == 0 ? shoal_team_ep(team, 1) : NULL;
    p->recv_ep = me == 1 ? shoal_team_ep(team, 0) : NULL;
    if (deadlock) {
        p->recv_ep = shoal_team_ep(team, 1 - me);
        return shoal_prim_recv(p, (char *)plan->args.recvbuf, plan->esize);
    }
    size_t bytes = plan->args.count * plan->esize, piece = plan->piece_elems * plan->esize;
    for (size_t off = 0; off < bytes; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        shoal_status_t s = me == 0
                               ? shoal_prim_send(p, (const char *)plan->args.sendbuf + off, len)
                               : shoal_prim_recv(p, (char *)plan->args.recvbuf + off, len);
        if (s != SHOAL_OK)
            return s;
    }
    return me == 0 ? shoal_prim_flush(p) : SHOAL_OK;
}

static const shoal_algo_ops_t stream_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "stream",
    .cost = stream_cost,
    .plan = stream_plan,
    .run = stream_run,
};

/* k pieces of B bytes: c = B / copy bandwidth (a pass over memory), w = B /
 * link bandwidth. Inside a host the receiver follows the writer, one
 * piece behind: (k + 1) c + latency. Between hosts the link is slower than
 * the copies, so the pieces queue on it: c + k w + latency + c. */
static void test_stream_closed_form(void **state)
{
    (void)state;
    const double B = 16384, bwc = 10e9, bwn = 1e9, lat_in = 0.5e-6, lat_net = 5e-6;
    const char *links = "shm:0.5us:10000000000,tcp:5us:1000000000";
    const int k = 37;
    double c = B / bwc, w = B / bwn, t = 0;
    deadlock = 0;

    shoal_sim_t *sim = make_sim(1, 2, 0, (size_t)B, links);
    assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_BROADCAST, (size_t)(k * B / 4),
                                   SHOAL_FLOAT32, &stream_ops, &t, NULL), SHOAL_OK);
    double want = (k + 1) * c + lat_in;
    if (fabs(t - want) > 1e-9 * want)
        fail_msg("inside a host: %.9g s predicted, %.9g s by the rules", t, want);
    /* A second run starts from a clean slate: the same time. */
    double again = 0;
    assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_BROADCAST, (size_t)(k * B / 4),
                                   SHOAL_FLOAT32, &stream_ops, &again, NULL), SHOAL_OK);
    assert_true(fabs(again - t) <= 1e-9 * t);
    shoal_sim_destroy(sim);

    sim = make_sim(2, 1, 0, (size_t)B, links);
    assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_BROADCAST, (size_t)(k * B / 4),
                                   SHOAL_FLOAT32, &stream_ops, &t, NULL), SHOAL_OK);
    want = 2 * c + k * w + lat_net;
    if (fabs(t - want) > 1e-9 * want)
        fail_msg("between hosts: %.9g s predicted, %.9g s by the rules", t, want);
    shoal_sim_destroy(sim);
}

/* A deadlocked schedule ends with SHOAL_ERR_TIMEOUT; the simulation still
 * runs the next call. */
static void test_deadlock(void **state)
{
    (void)state;
    shoal_sim_t *sim = make_sim(2, 2, 0, TEST_CHUNK, NULL);
    double t;
    deadlock = 1;
    assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_BROADCAST, 16, SHOAL_FLOAT32, &stream_ops,
                                   &t, NULL),
                     SHOAL_ERR_TIMEOUT);
    deadlock = 0;
    assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_BROADCAST, 16, SHOAL_FLOAT32, &stream_ops,
                                   &t, NULL),
                     SHOAL_OK);
    assert_true(t > 0);
    shoal_sim_destroy(sim);
}

static unsigned long long sent_bytes(shoal_sim_t *sim)
{
    unsigned long long sum = 0;
    for (int r = 0; r < shoal_sim_nranks(sim); r++) {
        shoal_team_t *t = shoal_sim_team(sim, r);
        for (int peer = 0; peer < t->nranks; peer++)
            if (t->eps[peer])
                sum += atomic_load(&t->eps[peer]->tx_bytes);
    }
    return sum;
}

/* The ring all-reduce sends 2 (n - 1) blocks of S / n per rank. On N hosts
 * of one rank it cannot beat the links between hosts, 2 (N - 1) / N x S /
 * bandwidth; and since each step of a loop of N pieces waits for the
 * piece its neighbour sent in the step before, every step costs a piece's
 * wire time w, the latency and the two passes over memory 2c on the
 * critical path: 2 (N - 1) x loops x (w + L + 2c), which the prediction
 * must meet (within 2 %, for the first and last pieces). */
static void test_ring_bound(void **state)
{
    (void)state;
    const size_t S = (size_t)16 << 20, chunk = (size_t)128 << 10;
    const double bw = (double)(1u << 30), lat = 30e-6, copy = 10e9;
    const double w = (double)chunk / bw, c = (double)chunk / copy;
    for (int hosts = 2; hosts <= 5; hosts++) {
        shoal_sim_t *sim = make_sim(hosts, 1, 0, chunk, "shm:0.5us:10000000000,tcp:30us:1G");
        const shoal_algo_ops_t *ring = shoal_algo_find(SHOAL_COLL_ALLREDUCE, "ring");
        unsigned long long before = sent_bytes(sim);
        double t;
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, S / 4, SHOAL_FLOAT32, ring, &t,
                                       NULL),
                         SHOAL_OK);
        unsigned long long moved = sent_bytes(sim) - before;
        assert_true(moved == 2ull * (unsigned long long)(hosts - 1) * S);
        double bound = 2.0 * (hosts - 1) / hosts * (double)S / bw;
        size_t loops = (S + (size_t)hosts * chunk - 1) / ((size_t)hosts * chunk);
        double steps = 2.0 * (hosts - 1) * (double)loops * (w + lat + 2 * c);
        if (t < bound || t > 1.02 * steps)
            fail_msg("%d hosts: ring %.6f s, link bound %.6f s, step bound %.6f s", hosts, t,
                     bound, steps);
        shoal_sim_destroy(sim);
    }
}

/* On made-up clusters up to 64 ranks, for every collective and sizes 8 B
 * to 64 MiB, the algorithm the cost model picks is predicted within 2.5x
 * of the fastest one the simulator finds. */
static void test_cost_model_choice(void **state)
{
    (void)state;
    static const int shapes[][2] = {{2, 1}, {2, 2}, {2, 4}, {4, 2}, {1, 8}, {3, 3}, {8, 8}};
    for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
        shoal_sim_t *sim = make_sim(shapes[sh][0], shapes[sh][1], 0, 0, NULL);
        int n = shoal_sim_nranks(sim);
        for (int k = 0; k < SHOAL_COLL_SEND; k++) {
            if (k == SHOAL_COLL_ALLTOALLV)
                continue;
            int per_rank = k != SHOAL_COLL_ALLREDUCE && k != SHOAL_COLL_BROADCAST &&
                           k != SHOAL_COLL_REDUCE;
            for (size_t bytes = 8; bytes <= ((size_t)64 << 20); bytes *= 16) {
                size_t count = bytes / 4 / (per_rank ? (size_t)n : 1);
                if (count == 0)
                    continue;
                shoal_coll_args_t args = {.kind = (shoal_coll_kind_t)k, .count = count,
                                          .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM};
                double best = INFINITY, chosen = 0, t;
                const char *best_name = "", *auto_name = "";
                for (int i = 0; shoal_algo_at((shoal_coll_kind_t)k, i); i++) {
                    const shoal_algo_ops_t *a = shoal_algo_at((shoal_coll_kind_t)k, i);
                    if (a->cost(shoal_sim_team(sim, 0), &args) < 0)
                        continue;
                    assert_int_equal(shoal_sim_run(sim, (shoal_coll_kind_t)k, count,
                                                   SHOAL_FLOAT32, a, &t, NULL),
                                     SHOAL_OK);
                    if (t < best) {
                        best = t;
                        best_name = a->name;
                    }
                }
                assert_int_equal(shoal_sim_run(sim, (shoal_coll_kind_t)k, count, SHOAL_FLOAT32,
                                               NULL, &chosen, &auto_name),
                                 SHOAL_OK);
                if (chosen > 2.5 * best)
                    fail_msg("%d x %d ranks, %s of %zu B: the cost model picks %s (%.1f us), "
                             "%s takes %.1f us", shapes[sh][0], shapes[sh][1],
                             shoal_coll_kind_name((shoal_coll_kind_t)k), bytes, auto_name,
                             chosen * 1e6, best_name, best * 1e6);
            }
        }
        shoal_sim_destroy(sim);
    }
}

/* Every codec schedule that can serve the shape (the two-shot and the
 * tree not for ternary, the hierarchical one across hosts only), counts 0,
 * 1, 19 and several pieces, dry: no byte of the buffers or the residual
 * touched. */
static void test_codec_schedules(void **state)
{
    (void)state;
    static const int shapes[][3] = {{1, 1, 0}, {1, 2, 0}, {3, 1, 0}, {2, 2, 0},
                                    {1, 5, 0}, {2, 3, 0}, {3, 2, 0}, {2, 4, 2}};
    static const size_t counts[] = {0, 1, 19, 5 * TEST_CHUNK + 7};
    static const shoal_codec_ops_t *const codecs[] = {&shoal_codec_int8, &shoal_codec_ternary};
    static const int algos[] = {SHOAL_COMPRESS_ALGO_AUTO, SHOAL_COMPRESS_ALGO_RING,
                                SHOAL_COMPRESS_ALGO_TWO_SHOT, SHOAL_COMPRESS_ALGO_TREE};
    for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
        shoal_sim_t *sim = make_sim(shapes[sh][0], shapes[sh][1], shapes[sh][2], TEST_CHUNK,
                                    NULL);
        int n = shoal_sim_nranks(sim);
        for (size_t ci = 0; ci < 2; ci++) {
            shoal_codec_t c = {.ops = codecs[ci], .block = 64};
            for (size_t ai = 0; ai < sizeof(algos) / sizeof(algos[0]); ai++) {
                if (codecs[ci] == &shoal_codec_ternary && algos[ai] > SHOAL_COMPRESS_ALGO_RING)
                    continue;
                shoal_sim_set_codec(sim, &c, algos[ai]);
                for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                    double t = -1;
                    const char *name = "";
                    shoal_status_t s = shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, counts[k],
                                                     SHOAL_FLOAT32, NULL, &t, &name);
                    if (s != SHOAL_OK || t < 0 || (n > 1 && counts[k] > 0 && t <= 0))
                        fail_msg("%d x %d ranks: %s %s count %zu: %s, %g s", shapes[sh][0],
                                 shapes[sh][1], codecs[ci]->name, name, counts[k],
                                 shoal_status_string(s), t);
                }
            }
        }
        /* Only float32 compresses; plain calls again once the codec is gone. */
        double t;
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, 100, SHOAL_FLOAT64, NULL, &t,
                                       NULL),
                         SHOAL_ERR_INVALID_ARG);
        shoal_sim_set_codec(sim, NULL, 0);
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, 100, SHOAL_FLOAT64, NULL, &t,
                                       NULL),
                         SHOAL_OK);
        shoal_sim_destroy(sim);
    }
}

/* On whole loops of whole pieces, the codec ring and the two-shot both
 * send 2 (n - 1) pieces of wire per rank and loop; the hierarchical one
 * sends less than the plain hierarchical all-reduce (only its rails carry
 * compressed data), and more than nothing. */
static void test_codec_bytes(void **state)
{
    (void)state;
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 32};
    size_t piece = shoal_ring_codec_piece(&c, TEST_CHUNK), wire = c.ops->wire_bytes(&c, piece);
    for (int n = 2; n <= 6; n++) {
        shoal_sim_t *sim = make_sim(1, n, 0, TEST_CHUNK, NULL);
        size_t loops = 3, count = loops * (size_t)n * piece;
        static const int algos[] = {SHOAL_COMPRESS_ALGO_RING, SHOAL_COMPRESS_ALGO_TWO_SHOT};
        for (int ai = 0; ai < 2; ai++) {
            shoal_sim_set_codec(sim, &c, algos[ai]);
            unsigned long long before = sent_bytes(sim);
            double t;
            assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, count, SHOAL_FLOAT32, NULL,
                                           &t, NULL),
                             SHOAL_OK);
            unsigned long long moved = sent_bytes(sim) - before;
            unsigned long long want = 2ull * (unsigned long long)(n * (n - 1)) * loops * wire;
            if (moved != want)
                fail_msg("%d ranks, algo %d: %llu B sent, %llu B by the schedule", n,
                         algos[ai], moved, want);
        }
        shoal_sim_destroy(sim);
    }
    shoal_sim_t *sim = make_sim(2, 3, 0, TEST_CHUNK, NULL);
    size_t count = 100003;
    double t;
    unsigned long long before = sent_bytes(sim);
    assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, count, SHOAL_FLOAT32,
                                   &shoal_hier_allreduce_ops, &t, NULL),
                     SHOAL_OK);
    unsigned long long plain = sent_bytes(sim) - before;
    shoal_sim_set_codec(sim, &c, SHOAL_COMPRESS_ALGO_AUTO);
    const char *name = "";
    before = sent_bytes(sim);
    assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, count, SHOAL_FLOAT32, NULL, &t,
                                   &name),
                     SHOAL_OK);
    unsigned long long compressed = sent_bytes(sim) - before;
    assert_string_equal(name, "hier-codec");
    if (compressed == 0 || compressed >= plain)
        fail_msg("2 x 3 ranks: hier-codec sent %llu B, hier %llu B", compressed, plain);
    shoal_sim_destroy(sim);
}

/* Bytes rank r sent to ranks of other hosts. */
static unsigned long long cross_bytes(shoal_sim_t *sim)
{
    unsigned long long sum = 0;
    for (int r = 0; r < shoal_sim_nranks(sim); r++) {
        shoal_team_t *t = shoal_sim_team(sim, r);
        for (int peer = 0; peer < t->nranks; peer++)
            if (t->eps[peer] && t->cluster.host_of[peer] != t->cluster.host_of[r])
                sum += atomic_load(&t->eps[peer]->tx_bytes);
    }
    return sum;
}

/* The compressed reduce-scatter across hosts (hier-codec, with AUTO): on
 * 2 and 3 hosts of 3 ranks and 2 of 2, the links between
 * hosts carry each host's sum of a block once in the codec's wire: the
 * plain hierarchy's bytes there over about the codec's ratio, and fewer
 * than the flat two-shot's, which sends every rank's contribution. */
static void test_codec_rs_hosts(void **state)
{
    (void)state;
    shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 64};
    static const int shapes[][2] = {{2, 3}, {3, 3}, {2, 2}};
    size_t count = 100032;
    double ratio = (double)count * sizeof(float) / (double)c.ops->wire_bytes(&c, count);
    for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
        shoal_sim_t *sim = make_sim(shapes[sh][0], shapes[sh][1], 0, TEST_CHUNK, NULL);
        double t;
        const char *name = "";
        unsigned long long before = cross_bytes(sim);
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_REDUCE_SCATTER, count, SHOAL_FLOAT32,
                                       &shoal_hier_reduce_scatter_ops, &t, NULL),
                         SHOAL_OK);
        unsigned long long plain = cross_bytes(sim) - before;
        shoal_sim_set_codec(sim, &c, SHOAL_COMPRESS_ALGO_AUTO);
        before = cross_bytes(sim);
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_REDUCE_SCATTER, count, SHOAL_FLOAT32,
                                       NULL, &t, &name),
                         SHOAL_OK);
        unsigned long long hier = cross_bytes(sim) - before;
        assert_string_equal(name, "hier-codec");
        shoal_sim_set_codec(sim, &c, SHOAL_COMPRESS_ALGO_TWO_SHOT);
        before = cross_bytes(sim);
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_REDUCE_SCATTER, count, SHOAL_FLOAT32,
                                       NULL, &t, &name),
                         SHOAL_OK);
        unsigned long long flat = cross_bytes(sim) - before;
        assert_string_equal(name, "twoshot-codec");
        if (fabs((double)plain / (double)hier - ratio) > 0.05 * ratio || flat <= hier)
            fail_msg("%d x %d ranks: across hosts plain %llu B, hier-codec %llu B (%.2fx, the "
                     "codec's %.2fx), two-shot %llu B",
                     shapes[sh][0], shapes[sh][1], plain, hier, (double)plain / (double)hier,
                     ratio, flat);
        shoal_sim_destroy(sim);
    }
}

/* The hierarchical all-reduce's pipeline, forced to 3 pieces and to 1
 * (its phases one after the other): plain and compressed (int8), and the
 * reduce-scatter's, all-gather's and broadcast's, on
 * rank counts 1..8 with uneven hosts, counts 0, 1, odd and several pieces,
 * dry to its end. */
static void test_hier_pipeline(void **state)
{
    (void)state;
    static const int shapes[][3] = {{1, 3, 0}, {2, 1, 0}, {2, 2, 0}, {3, 1, 0},
                                    {2, 3, 0}, {3, 2, 0}, {2, 4, 2}, {4, 2, 0}};
    static const size_t counts[] = {0, 1, 19, 3 * TEST_CHUNK + 7};
    static const char *const pipes[] = {"3", "1"};
    static const shoal_coll_kind_t others[] = {SHOAL_COLL_REDUCE_SCATTER, SHOAL_COLL_ALLGATHER,
                                               SHOAL_COLL_BROADCAST};
    const shoal_algo_ops_t *hier = shoal_algo_find(SHOAL_COLL_ALLREDUCE, "hier");
    assert_non_null(hier);
    for (size_t pi = 0; pi < 2; pi++) {
        harness_setenv("SHOAL_HIER_PIPE", pipes[pi]);
        for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
            shoal_sim_t *sim = make_sim(shapes[sh][0], shapes[sh][1], shapes[sh][2],
                                        TEST_CHUNK, NULL);
            shoal_codec_t c = {.ops = &shoal_codec_int8, .block = 64};
            for (int codec = 0; codec < 2; codec++) {
                shoal_sim_set_codec(sim, codec ? &c : NULL, SHOAL_COMPRESS_ALGO_AUTO);
                if (codec && shapes[sh][0] < 2)
                    continue;
                for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                    double t = -1;
                    const char *name = "";
                    shoal_status_t s = shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, counts[k],
                                                     SHOAL_FLOAT32, codec ? NULL : hier, &t,
                                                     &name);
                    if (s != SHOAL_OK || t < 0)
                        fail_msg("pipe %s, %d x %d ranks: %s count %zu: %s", pipes[pi],
                                 shapes[sh][0], shapes[sh][1], name, counts[k],
                                 shoal_status_string(s));
                }
            }
            /* The reduce-scatter, all-gather and broadcast share the
             * pipeline. */
            shoal_sim_set_codec(sim, NULL, SHOAL_COMPRESS_ALGO_AUTO);
            for (size_t o = 0; o < sizeof(others) / sizeof(others[0]); o++) {
                const shoal_algo_ops_t *a = shoal_algo_find(others[o], "hier");
                for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                    double t = -1;
                    shoal_status_t s = shoal_sim_run(sim, others[o], counts[k], SHOAL_FLOAT32,
                                                     a, &t, NULL);
                    if (s != SHOAL_OK || t < 0)
                        fail_msg("pipe %s, %d x %d ranks: hier %s count %zu: %s", pipes[pi],
                                 shapes[sh][0], shapes[sh][1],
                                 shoal_coll_kind_name(others[o]), counts[k],
                                 shoal_status_string(s));
                }
            }
            shoal_sim_destroy(sim);
        }
    }
    harness_setenv("SHOAL_HIER_PIPE", NULL);
}

/* 64 MiB over hosts of 8 ranks: the pipelined hierarchical all-reduce is
 * at least as fast as the flat ring in the simulator, and the cost model
 * prefers it. Its phases one after the other (SHOAL_HIER_PIPE=1) fall
 * behind the ring from 8 hosts. At 128 hosts the two are within 1% (the
 * rails save 0.7% of the ring's bytes): the pipeline's last all-gather
 * must follow its rails block by block to keep up. */
static void test_hier_beats_ring(void **state)
{
    (void)state;
    static const int hosts[] = {4, 8, 32, 128};
    /* 128 hosts take most of this test's time (minutes under TSan): the
     * full run checks them, the short variants stop at 32. */
    size_t nhosts = sizeof(hosts) / sizeof(hosts[0]) - (harness_quick() ? 1 : 0);
    const size_t count = ((size_t)64 << 20) / 4;
    const shoal_algo_ops_t *ring = shoal_algo_find(SHOAL_COLL_ALLREDUCE, "ring");
    const shoal_algo_ops_t *hier = shoal_algo_find(SHOAL_COLL_ALLREDUCE, "hier");
    for (size_t h = 0; h < nhosts; h++) {
        shoal_sim_t *sim = make_sim(hosts[h], 8, 0, 0, NULL);
        shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .count = count,
                                  .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM};
        double tr, th, ta;
        const char *name = "";
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, count, SHOAL_FLOAT32, ring,
                                       &tr, NULL), SHOAL_OK);
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, count, SHOAL_FLOAT32, hier,
                                       &th, NULL), SHOAL_OK);
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, count, SHOAL_FLOAT32, NULL,
                                       &ta, &name), SHOAL_OK);
        const shoal_team_t *team = shoal_sim_team(sim, 0);
        double cr = ring->cost(team, &args), ch = hier->cost(team, &args);
        if (th > tr || ch >= cr || strcmp(name, "hier"))
            fail_msg("%d x 8 ranks, 64 MiB: simulated ring %.1f us, hier %.1f us; "
                     "cost ring %.1f us, hier %.1f us; auto picks %s", hosts[h], tr * 1e6,
                     th * 1e6, cr * 1e6, ch * 1e6, name);
        shoal_sim_destroy(sim);
    }
}

/* tcp's slot rule: full depth while the budget lasts, then fewer, never
 * none; no budget, full depth. */
static void test_tcp_slot_rule(void **state)
{
    (void)state;
    const size_t M = (size_t)1 << 20, chunk = 512 * 1024;
    for (size_t k = 1; k <= 32; k++)
        assert_int_equal(shoal_tcp_slots_rule(64 * M, chunk, 2, k), 2);
    assert_int_equal(shoal_tcp_slots_rule(64 * M, chunk, 2, 33), 1);
    assert_int_equal(shoal_tcp_slots_rule(64 * M, chunk, 2, 100000), 1);
    assert_int_equal(shoal_tcp_slots_rule(64 * M, chunk, 8, 8), 8);
    assert_int_equal(shoal_tcp_slots_rule(64 * M, chunk, 8, 16), 4);
    assert_int_equal(shoal_tcp_slots_rule(0, chunk, 8, 100000), 8);
}

/* Memory of lazily connected tcp per rank, one host per rank (every peer
 * over tcp) and 4 ranks per host (peers of the host are shm's): the ring
 * touches its two neighbours whatever the rank count, so its memory is
 * that of two peers at full depth; halving-doubling touches log2 n;
 * all-to-all touches every peer, beyond the first 32 at one slot each
 * way. Eager tcp holds every peer at full depth. */
static void run_memory(int hosts, int per_host, shoal_coll_kind_t kind, const char *algo,
                       int want_peers)
{
    const size_t chunk = 512 * 1024;
    const shoal_config_t *conf = shoal_config_get();
    shoal_sim_t *sim = make_sim(hosts, per_host, 0, chunk, NULL);
    int n = hosts * per_host;
    size_t count = kind == SHOAL_COLL_ALLTOALL ? 64 : (size_t)n * 4096;
    double t;
    assert_int_equal(shoal_sim_run(sim, kind, count, SHOAL_FLOAT32,
                                   shoal_algo_find(kind, algo), &t, NULL),
                     SHOAL_OK);
    size_t want_lazy = 0;
    for (int k = 1; k <= want_peers; k++)
        want_lazy += 2 * chunk * shoal_tcp_slots_rule(conf->tcp.mem, chunk, conf->tcp.nslots,
                                                      (size_t)k);
    for (int r = 0; r < n; r++) {
        shoal_sim_mem_t m;
        shoal_sim_memory(sim, r, &m);
        if (m.peers_all != n - per_host || m.peers_touched != want_peers ||
            m.bytes_eager != (size_t)(n - per_host) * 2 * conf->tcp.nslots * chunk ||
            m.bytes_lazy != want_lazy)
            fail_msg("%s %s, %d x %d ranks, rank %d: %d of %d peers touched (want %d), "
                     "%zu B lazy (want %zu), %zu B eager", shoal_coll_kind_name(kind), algo,
                     hosts, per_host, r, m.peers_touched, m.peers_all, want_peers,
                     m.bytes_lazy, want_lazy, m.bytes_eager);
    }
    shoal_sim_forget_peers(sim);
    shoal_sim_mem_t m;
    shoal_sim_memory(sim, 0, &m);
    assert_int_equal(m.peers_touched, 0);
    assert_int_equal(m.bytes_lazy, 0);
    shoal_sim_destroy(sim);
}

static void test_lazy_memory(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TCP_MEM", NULL);
    harness_setenv("SHOAL_TCP_NSLOTS", NULL);
    for (int n = 4, lg = 2; n <= 256; n *= 4, lg += 2) {
        run_memory(n, 1, SHOAL_COLL_ALLREDUCE, "ring", 2);
        run_memory(n, 1, SHOAL_COLL_ALLREDUCE, "rhd", lg);
        run_memory(n, 1, SHOAL_COLL_ALLTOALL, "pairwise", n - 1);
    }
    /* Odd counts: the ring still touches two. */
    run_memory(7, 1, SHOAL_COLL_ALLREDUCE, "ring", 2);
    run_memory(65, 1, SHOAL_COLL_ALLREDUCE, "ring", 2);
    /* With 4 ranks per host only the other hosts' ranks count: the
     * all-to-all touches all of them. */
    run_memory(16, 4, SHOAL_COLL_ALLTOALL, "pairwise", 60);
}

/* 64 MiB over hosts of 8 ranks: the pipelined hierarchical reduce-scatter,
 * all-gather and broadcast, in the pieces the cost model picks, are
 * faster in the simulator than their phases one after the other
 * (SHOAL_HIER_PIPE=1). */
static void test_hier_pipe_no_slower(void **state)
{
    (void)state;
    static const int hosts[] = {2, 8, 32};
    static const shoal_coll_kind_t kinds[] = {SHOAL_COLL_REDUCE_SCATTER, SHOAL_COLL_ALLGATHER,
                                              SHOAL_COLL_BROADCAST};
    const size_t total = ((size_t)64 << 20) / 4;
    for (size_t h = 0; h < sizeof(hosts) / sizeof(hosts[0]); h++) {
        shoal_sim_t *sim = make_sim(hosts[h], 8, 0, 0, NULL);
        int n = shoal_sim_nranks(sim);
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
            const shoal_algo_ops_t *hier = shoal_algo_find(kinds[k], "hier");
            size_t count = kinds[k] == SHOAL_COLL_BROADCAST ? total : total / (size_t)n;
            double t1, tp;
            harness_setenv("SHOAL_HIER_PIPE", "1");
            assert_int_equal(shoal_sim_run(sim, kinds[k], count, SHOAL_FLOAT32, hier, &t1, NULL),
                             SHOAL_OK);
            harness_setenv("SHOAL_HIER_PIPE", NULL);
            assert_int_equal(shoal_sim_run(sim, kinds[k], count, SHOAL_FLOAT32, hier, &tp, NULL),
                             SHOAL_OK);
            if (tp >= t1)
                fail_msg("%d x 8 ranks, 64 MiB %s: pipelined hier %.1f us, its phases one "
                         "after the other %.1f us", hosts[h],
                         shoal_coll_kind_name(kinds[k]), tp * 1e6, t1 * 1e6);
        }
        shoal_sim_destroy(sim);
    }
}

/* The flat ring all-reduce over hosts joined by links of 1 ms: with 4
 * tcp slots it keeps three loops in flight and waits for the latency once
 * for the three, so 64 MiB over 4 hosts takes less time than with the 2
 * slots that keep one. */
static void test_ring_deep(void **state)
{
    (void)state;
    const size_t count = ((size_t)64 << 20) / 4;
    const shoal_algo_ops_t *ring = shoal_algo_find(SHOAL_COLL_ALLREDUCE, "ring");
    double t[2];
    static const char *const slots[] = {"2", "4"};
    for (int i = 0; i < 2; i++) {
        harness_setenv("SHOAL_TCP_NSLOTS", slots[i]);
        shoal_sim_t *sim = make_sim(4, 1, 0, 0, "tcp:1ms:1200M,shm:0.5us:10G");
        assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLREDUCE, count, SHOAL_FLOAT32, ring,
                                       &t[i], NULL), SHOAL_OK);
        shoal_sim_destroy(sim);
    }
    harness_setenv("SHOAL_TCP_NSLOTS", NULL);
    if (t[1] >= t[0])
        fail_msg("4 hosts, 1 ms links, 64 MiB: ring with 4 tcp slots %.1f us, with 2 %.1f us",
                 t[1] * 1e6, t[0] * 1e6);
}

static void test_bad_config(void **state)
{
    (void)state;
    shoal_sim_config_t cfg;
    shoal_sim_t *sim = NULL;
    assert_int_equal(shoal_sim_config_init(&cfg, 0, 4), SHOAL_OK);
    assert_int_equal(shoal_sim_create(&cfg, &sim), SHOAL_ERR_INVALID_ARG);
    assert_null(sim);
    sim = make_sim(2, 2, 0, TEST_CHUNK, NULL);
    double t;
    /* Send, recv and all-to-all-v are not collectives it runs. */
    assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_SEND, 4, SHOAL_FLOAT32, NULL, &t, NULL),
                     SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_sim_run(sim, SHOAL_COLL_ALLTOALLV, 4, SHOAL_FLOAT32, NULL, &t, NULL),
                     SHOAL_ERR_INVALID_ARG);
    shoal_sim_destroy(sim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_schedule),
        cmocka_unit_test(test_stream_closed_form),
        cmocka_unit_test(test_deadlock),
        cmocka_unit_test(test_ring_bound),
        cmocka_unit_test(test_cost_model_choice),
        cmocka_unit_test(test_codec_schedules),
        cmocka_unit_test(test_codec_bytes),
        cmocka_unit_test(test_codec_rs_hosts),
        cmocka_unit_test(test_hier_pipeline),
        cmocka_unit_test(test_hier_beats_ring),
        cmocka_unit_test(test_hier_pipe_no_slower),
        cmocka_unit_test(test_ring_deep),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_tcp_slot_rule),
        cmocka_unit_test(test_lazy_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
