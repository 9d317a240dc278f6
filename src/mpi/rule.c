/* SHOAL_MPI_PATH=auto: which of shoal and MPI's own path serves a call.
 *
 * Where MPI's path is the faster one (small messages, where its shared
 * memory collectives answer in a few hundred nanoseconds), the door
 * passes the call on, by a choice every rank makes alike. A choice is
 * kept per communicator, collective and size class (the bytes a rank's
 * block holds, by power of two: what every rank passes alike). It is
 * learnt from the program's own blocking calls of that class, timed on
 * both paths: one untimed run on each (connections, first touches), then
 * SHOAL_MPI_LEARN timed rounds on each, interleaved shoal, MPI, MPI,
 * shoal, ... so that a drift in the machine's speed weighs on both. A
 * blocking call's time on a rank would include its wait for the others
 * to arrive, which the program's own work between calls varies: a timed
 * round starts after a PMPI_Barrier, and a rank keeps its best round on
 * each path (its median where a path had three rounds or more,
 * rounds_time). After the last round every rank puts its two times
 * into one PMPI_Allreduce (MPI_MAX: the slowest rank's), and all keep the
 * path whose time is smaller, or shoal's where its path failed on any
 * rank (the program's call then reports why). Where a path had three
 * timed rounds or more, the gap between its two best tells how finely
 * the learning sees: shoal's path must then win by more than that gap
 * (the widest on any rank), and MPI's serves where the two are closer.
 *
 * Most calls can run again without harm: out of place, a collective's
 * result depends only on its inputs, so running it twice leaves the same
 * output. The first such call of a class learns the whole class at once:
 * each round runs the call several times (round_calls), so that the
 * ranks' skew leaving the barrier, a microsecond or two, weighs little
 * on a call of a few hundred nanoseconds, and so that the first run of a
 * round, which finds the caches as the other path left them, weighs
 * little on a call of tens of microseconds. Where every rank's rounds
 * were short (SHORT_ROUND_NS), each path learns 3 x SHOAL_MPI_LEARN
 * rounds more before the class chooses. A run on shoal's path goes
 * through the whole of the door's entry again, as the program's calls
 * will, and one on MPI's straight to PMPI_*, as the calls passed at once
 * will. The call then runs once more on the chosen path. Calls that cannot run again (in place, rooted, unequal
 * blocks) learn one round per call: a class's first two take a path
 * each, untimed, the next 2 x SHOAL_MPI_LEARN one timed call each. Whether
 * a call can run again follows from what MPI requires every rank to pass
 * alike (MPI_IN_PLACE is all ranks' or none's for these collectives).
 *
 * Every rank counts the same calls of a class, in the same order (MPI
 * requires a communicator's collectives in one order on all ranks, and
 * a blocking call never matches a non-blocking one), so all switch at the
 * same call. Non-blocking calls, which cannot be timed here, follow their
 * blocking form's choice once made, and take shoal's path before.
 * All-to-all-v always takes shoal's: its ranks' byte counts differ.
 *
 * A communicator's calls are made by one thread at a time (MPI's rule
 * for collectives on one communicator), which orders the state below. */
#include "mpi_priv.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"

#include <stdlib.h>

/* The size class of n bytes: 0 for none, else 1 + floor(log2 n). */
static int size_class(size_t n)
{
    int b = n ? 64 - __builtin_clzll((unsigned long long)n) : 0;
    return b < DOOR_NCLASSES ? b : DOOR_NCLASSES - 1;
}

/* A class's first byte count, for the log. */
static size_t class_bytes(int b)
{
    return b == 0 ? 0 : (size_t)1 << (b - 1);
}

/* Which path the i-th run of a class still learning takes: 1 shoal, 0
 * MPI. The first two are untimed. */
static int learn_path(int i)
{
    if (i < 2)
        return i == 0;
    int j = (i - 2) % 4;
    return j == 0 || j == 3;
}

/* How many times a timed round runs a call of this many bytes: 8 MiB's
 * worth, at most 64. With 64 KiB's worth, one run in each of a round of
 * two 32 KiB all-reduces on 2 ranks, the learnt time of shoal's path was
 * three times its steady one. With 1 MiB's worth, two 512 KiB
 * all-reduces a round, shoal's copiers were still learning (base/copy.h:
 * their first 32 copies each way, some at 2 GB/s) through both rounds:
 * it learnt 60 us against MPI's 59 and went to MPI, where shoal's steady
 * 45 us was about half MPI's. */
static int round_calls(size_t bytes)
{
    size_t n = ((size_t)8 << 20) / (bytes ? bytes : 1);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* The bytes of a rank's block (what the size class is of). */
static size_t call_bytes(const door_call_t *k)
{
    size_t es = 1;
    if (k->kind == DOOR_BARRIER)
        return 0;
    shoal_dtype_size(k->dt, &es);
    return k->count * es;
}

/* A class that learns at once whose shortest round on each path lasted
 * less than this on every rank (by the real clock) is cheap to learn
 * further: it then learns
 * 3 x SHOAL_MPI_LEARN more rounds on each path before it chooses. Between
 * two rounds of 64 8-byte all-reduces on 2 ranks, the machine's own noise
 * is several percent, as large as the difference between the paths; the
 * best of 8 rounds, and the gap between the two best, tell more. */
#define SHORT_ROUND_NS 2000000u

/* SHOAL_TEST_MPI_SLOW: the time rank 1 lost on the path named, as if
 * its clock had run on 1 s at each call's entry there: lag_ns, which
 * rule_now adds. Where the lag is charged (shoal_mpi_take, run_once)
 * shows that what the rule times holds the door's own work on each path.
 * "near" charges both paths: 1 s a call on MPI's, and on shoal's 0.97 s
 * a call in its class's first timed round and 0.99 s in each later one.
 * Shoal's path is then the faster, by 1% (its median) or 3% (its best),
 * but its two best rounds are 2% apart: where a path had three timed
 * rounds, MPI's must be chosen, and shoal's where it had fewer. */
static _Thread_local __attribute__((tls_model("initial-exec"))) uint64_t lag_ns;

static uint64_t rule_now(void)
{
    return shoal_now_ns() + lag_ns;
}

void shoal_mpi_rule_test_lag(const door_call_t *k, int shoal)
{
    int slow = shoal_config_get()->mpi.test_slow;
    if (!slow || !k->dc || shoal_mpi_comm_rank(k->mpi) != 1)
        return;
    if (slow == 3 && shoal) {
        const door_class_t *cl = &k->dc->rule[k->kind][size_class(call_bytes(k))];
        lag_ns += cl->rounds[1] ? 990000000u : 970000000u;
    } else if (slow == 3 || slow == (shoal ? 1 : 2)) {
        lag_ns += 1000000000u;
    }
}

/* A timed run's seconds per call, as this rank's best and second best on
 * its path. */
static void class_time(door_class_t *cl, int shoal, double s)
{
    cl->rounds[shoal]++;
    if (cl->t[shoal] == 0 || s < cl->t[shoal]) {
        cl->t2[shoal] = cl->t[shoal];
        cl->t[shoal] = s;
    } else if (cl->t2[shoal] == 0 || s < cl->t2[shoal]) {
        cl->t2[shoal] = s;
    }
}

/* How far apart this rank's two best rounds on a path are, as a fraction
 * of the best: what the learning cannot tell apart. Known only where a
 * path had three timed rounds or more, so that the first, which may still
 * find caches or copiers cold, cannot be one of the two (0 otherwise). */
static double class_noise(const door_class_t *cl)
{
    double n = 0;
    for (int p = 0; p < 2; p++) {
        if (cl->rounds[p] >= 3 && cl->t[p] > 0 && cl->t2[p] / cl->t[p] - 1 > n)
            n = cl->t2[p] / cl->t[p] - 1;
    }
    return n;
}

/* What every rank learnt of a class, the slowest rank's (MPI_MAX),
 * collective over k->mpi: [0] MPI's time, [1] shoal's, [2] whether
 * shoal's path failed anywhere, [3] the widest gap between two best
 * rounds (class_noise), [4] the longer of the shortest rounds on each
 * path, by the real clock, ns (what one more round of each costs). */
enum { GOT_MPI, GOT_SHOAL, GOT_FAILED, GOT_NOISE, GOT_ROUND, GOT_N };

static void class_gather(const door_call_t *k, const door_class_t *cl, const double t[2],
                         uint64_t round_ns, double got[GOT_N])
{
    double mine[GOT_N] = {t[0], t[1], cl->failed, class_noise(cl), (double)round_ns};
    if (PMPI_Allreduce(mine, got, GOT_N, MPI_DOUBLE, MPI_MAX, k->mpi) != MPI_SUCCESS)
        got[GOT_FAILED] = 1; /* MPI reported its trouble; shoal names dead ranks */
}

/* The class's choice from what every rank learnt: shoal's path where its
 * time is no more than MPI's, less what the learning cannot tell apart.
 * Where the two paths are that close, MPI's serves: the program then
 * runs as fast as without the door, rather than as fast or a little
 * slower. */
static void class_pick(const door_call_t *k, door_class_t *cl, const double got[GOT_N],
                       const char *stat)
{
    int shoal = got[GOT_FAILED] != 0 || got[GOT_SHOAL] * (1 + got[GOT_NOISE]) <= got[GOT_MPI];
    cl->path = shoal ? DOOR_PATH_SHOAL : DOOR_PATH_MPI;
    if (shoal_mpi_comm_rank(k->mpi) == 0) {
        int b = (int)(cl - k->dc->rule[k->kind]);
        shoal_info(INIT, "MPI door: %s of %zu..%zu B on %d ranks: shoal %.2f us, MPI "
                   "%.2f us (the slowest rank's %s of %d; rounds %.1f%% apart): %s from "
                   "now on", k->what, class_bytes(b), b ? 2 * class_bytes(b) - 1 : 0,
                   shoal_mpi_comm_size(k->mpi), got[GOT_SHOAL] * 1e6, got[GOT_MPI] * 1e6,
                   stat, cl->rounds[0], got[GOT_NOISE] * 100,
                   shoal ? "shoal's path" : "MPI's path");
    }
}

/* Set while learn_class runs a call again through the door's entry: the
 * call takes shoal's path without a look at its class, uncounted, and
 * a failure returns without MPI's error handler (the program's own call
 * reports it). */
static _Thread_local __attribute__((tls_model("initial-exec"))) int again_shoal;

int shoal_mpi_rule_again(void)
{
    return again_shoal;
}

/* Run k once on a path: whether it succeeded. Shoal's path goes through
 * the whole of the door's entry, which a program's call pays on it too:
 * timed from shoal_mpi_call_issue alone, an 8-byte all-reduce on 2 ranks
 * learnt 0.56 us on shoal's path against MPI's 0.59 and then took 0.72. */
static int run_once(door_call_t *k, int shoal)
{
    if (!shoal)
        shoal_mpi_rule_test_lag(k, 0);
    again_shoal = shoal;
    int rc = k->again(k, shoal);
    again_shoal = 0;
    return rc == MPI_SUCCESS;
}

/* The timed rounds of a class that learns at once: each path's seconds
 * per call, in order (at most 4 x SHOAL_MPI_LEARN each). */
typedef struct {
    double s[2][4 * SHOAL_MPI_LEARN_MAX];
    int n[2];
} rounds_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A path's time: the median of its rounds where it had three or more
 * (sorted in place), else its best. On 4 ranks sharing 2 cores, the best
 * of 8 rounds of 128-byte all-to-alls was shoal's by 10% (9.7 against
 * 10.8 us) while its calls then took 11.0 to 11.4 us against MPI's 10.3
 * to 11.4: the best round is the luckiest scheduling, the median the
 * common one. */
static double rounds_time(const door_class_t *cl, rounds_t *r, int p)
{
    if (r->n[p] < 3)
        return cl->t[p];
    qsort(r->s[p], (size_t)r->n[p], sizeof(double), cmp_double);
    int n = r->n[p];
    return n % 2 ? r->s[p][n / 2] : (r->s[p][n / 2 - 1] + r->s[p][n / 2]) / 2;
}

/* Runs from..to-1 of a class's learning (0 and 1 untimed, then timed
 * rounds), each path's until it fails; real_ns[p]: the shortest timed
 * round yet on path p, by the real clock (0: none). */
static void learn_rounds(door_call_t *k, door_class_t *cl, int from, int to, int ok[2],
                         uint64_t real_ns[2], rounds_t *r)
{
    int calls = round_calls(call_bytes(k));
    for (int i = from; i < to; i++) {
        int shoal = learn_path(i), timed = i >= 2;
        if (timed)
            PMPI_Barrier(k->mpi);
        uint64_t t0 = rule_now(), real0 = shoal_now_ns();
        for (int j = 0; j < (timed ? calls : 1) && ok[shoal]; j++)
            ok[shoal] = run_once(k, shoal);
        if (timed && ok[shoal]) {
            uint64_t real = shoal_now_ns() - real0;
            double per_call = (double)(rule_now() - t0) * 1e-9 / calls;
            class_time(cl, shoal, per_call);
            r->s[shoal][r->n[shoal]++] = per_call;
            if (real_ns[shoal] == 0 || real < real_ns[shoal])
                real_ns[shoal] = real;
        }
    }
    cl->failed = !ok[1];
}

/* The whole learning of k's class, from k run again and again. Where
 * shoal's first run fails on any rank (a mismatch between ranks, which
 * shoal finds and MPI might not), the class takes shoal's path at once:
 * the call then reports why. A later failure stops that path's runs on
 * the rank, which keeps to the barriers and the choice that the other
 * ranks make too. Whether to learn more rounds follows from what every
 * rank learnt (class_gather), so all learn alike. */
static void learn_class(door_call_t *k, door_class_t *cl)
{
    int learn = shoal_config_get()->mpi.learn, end = 2 + 2 * learn;
    int ok[2] = {1, run_once(k, 1)}, all = 0;
    if (PMPI_Allreduce(&ok[1], &all, 1, MPI_INT, MPI_MIN, k->mpi) != MPI_SUCCESS || !all) {
        cl->path = DOOR_PATH_SHOAL;
        return;
    }
    uint64_t real_ns[2] = {0, 0};
    rounds_t r = {.n = {0, 0}};
    double got[GOT_N], t[2];
    learn_rounds(k, cl, 1, end, ok, real_ns, &r);
    /* Sorting for the median keeps the order of nothing that matters. */
    t[0] = rounds_time(cl, &r, 0);
    t[1] = rounds_time(cl, &r, 1);
    class_gather(k, cl, t, real_ns[0] > real_ns[1] ? real_ns[0] : real_ns[1], got);
    if (!got[GOT_FAILED] && got[GOT_ROUND] < SHORT_ROUND_NS) {
        learn_rounds(k, cl, end, end + 6 * learn, ok, real_ns, &r);
        t[0] = rounds_time(cl, &r, 0);
        t[1] = rounds_time(cl, &r, 1);
        class_gather(k, cl, t, 0, got);
    }
    class_pick(k, cl, got, r.n[0] >= 3 ? "median" : "best");
}

int shoal_mpi_rule_take(door_call_t *k)
{
    const shoal_mpi_config_t *mc = &shoal_config_get()->mpi;
    if (mc->path == SHOAL_MPI_PATH_SHOAL || k->kind == DOOR_ALLTOALLV || again_shoal)
        return 1;
    door_class_t *cl = &k->dc->rule[k->kind][size_class(call_bytes(k))];
    if (cl->path != DOOR_PATH_LEARN)
        return cl->path == DOOR_PATH_SHOAL;
    if (k->nb)
        return 1;
    if (k->again) {
        learn_class(k, cl);
        return cl->path == DOOR_PATH_SHOAL;
    }
    int i = cl->calls++;
    k->learn = cl;
    k->learn_timed = i >= 2;
    k->learn_last = i + 1 == 2 + 2 * mc->learn;
    if (k->learn_timed)
        PMPI_Barrier(k->mpi); /* the ranks start the timed call together */
    k->t0_ns = rule_now();
    return learn_path(i);
}

void shoal_mpi_rule_done(door_call_t *k, int shoal)
{
    door_class_t *cl = k->learn;
    if (!cl)
        return;
    k->learn = NULL;
    if (k->learn_timed)
        class_time(cl, shoal, (double)(rule_now() - k->t0_ns) * 1e-9);
    if (k->learn_last) {
        double got[GOT_N];
        class_gather(k, cl, cl->t, 0, got);
        class_pick(k, cl, got, "best");
    }
}
