/* SHOAL_MPI_PATH=auto: which of shoal and MPI's own path serves a call.
 *
 * Where MPI's path is the faster one (small messages, where its shared
 * memory collectives answer in a few hundred nanoseconds), the door
 * passes the call on, by a choice every rank makes alike. A choice is
 * kept per communicator, collective and size class (the bytes a rank's
 * block holds, by power of two: what every rank passes alike). It is
 * learnt from the program's own blocking calls of that class: one
 * untimed call on each path (connections, first touches), then
 * SHOAL_MPI_LEARN timed calls on each, interleaved shoal, MPI, MPI,
 * shoal, ... so that a drift in the machine's speed weighs on both. A
 * blocking call's time on a rank would include its wait for the others
 * to arrive, which the program's own work between calls varies: a timed
 * call starts after a PMPI_Barrier, and a rank keeps its best time on
 * each path. After the last timed call every rank puts its two best times
 * into one PMPI_Allreduce (MPI_MAX: the slowest rank's), and all keep the
 * path whose time is smaller, shoal's on a tie.
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

/* Which path the i-th blocking call of a class still learning takes:
 * 1 shoal, 0 MPI. */
static int learn_path(int i)
{
    if (i < 2)
        return i == 0;
    int j = (i - 2) % 4;
    return j == 0 || j == 3;
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

int shoal_mpi_rule_take(door_call_t *k)
{
    const shoal_mpi_config_t *mc = &shoal_config_get()->mpi;
    if (mc->path == SHOAL_MPI_PATH_SHOAL || k->kind == DOOR_ALLTOALLV)
        return 1;
    door_class_t *cl = &k->dc->rule[k->kind][size_class(call_bytes(k))];
    if (cl->path != DOOR_PATH_LEARN)
        return cl->path == DOOR_PATH_SHOAL;
    if (k->nb)
        return 1;
    int i = cl->calls++;
    k->learn = cl;
    k->learn_timed = i >= 2;
    k->learn_last = i + 1 == 2 + 2 * mc->learn;
    if (k->learn_timed)
        PMPI_Barrier(k->mpi); /* the ranks start the timed call together */
    k->t0_ns = shoal_now_ns();
    return learn_path(i);
}

void shoal_mpi_rule_done(door_call_t *k, int shoal)
{
    door_class_t *cl = k->learn;
    if (!cl)
        return;
    k->learn = NULL;
    const shoal_mpi_config_t *mc = &shoal_config_get()->mpi;
    if (k->learn_timed) {
        double s = (double)(shoal_now_ns() - k->t0_ns) * 1e-9;
        if (mc->test_slow == (shoal ? 1 : 2) && shoal_mpi_comm_rank(k->mpi) == 1)
            s += 1.0;
        if (cl->t[shoal] == 0 || s < cl->t[shoal])
            cl->t[shoal] = s;
    }
    if (!k->learn_last)
        return;
    double slowest[2] = {cl->t[0], cl->t[1]};
    if (PMPI_Allreduce(cl->t, slowest, 2, MPI_DOUBLE, MPI_MAX, k->mpi) != MPI_SUCCESS)
        slowest[1] = 0; /* MPI reported its trouble; shoal names dead ranks */
    cl->path = slowest[1] <= slowest[0] ? DOOR_PATH_SHOAL : DOOR_PATH_MPI;
    if (shoal_mpi_comm_rank(k->mpi) == 0) {
        int b = (int)(cl - k->dc->rule[k->kind]);
        shoal_info(INIT, "MPI door: %s of %zu..%zu B on %d ranks: shoal %.1f us, MPI "
                   "%.1f us (the slowest rank's best of %d): %s from now on", k->what,
                   class_bytes(b), b ? 2 * class_bytes(b) - 1 : 0, shoal_mpi_comm_size(k->mpi),
                   slowest[1] * 1e6, slowest[0] * 1e6, mc->learn,
                   cl->path == DOOR_PATH_SHOAL ? "shoal's path" : "MPI's path");
    }
}
