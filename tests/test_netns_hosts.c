/* Several hosts on one machine: up to four network namespaces joined by a
 * bridge (itself in a namespace of its own), each holding one to four
 * ranks, in even, uneven and interleaved layouts (a host's ranks need not
 * be neighbours in rank order). Ranks of one namespace share memory and
 * the others are reached over tcp, so every collective crosses both
 * transports at once. Every collective runs under each algorithm setting
 * (auto, ring, the hierarchical list) on counts 0, 1, 1001 and several
 * pipeline pieces, in place and out of place; reductions are checked
 * element by element against the scalar reference, data moves against
 * the pattern each rank sent, with guard bytes behind the receive
 * buffers.
 *
 * Compressed all-reduces (core/compress_call.h) on two hosts of 1, 2 and
 * 3 ranks each, and 1 + 3: AUTO picks the hierarchical schedule
 * (hier-codec: full precision inside a host, the codec ring across), or
 * with one rank on each host the flat ring (ring-codec), with
 * int8 and ternary codecs, blocks of 32 and 128, nearest and stochastic
 * rounding, counts 0, 1, 1001 and several pipeline pieces of every rail,
 * each through the reference check of compress_ref.h (bitwise the same on
 * every rank and in place, within one quantisation per host of a double
 * reference, residuals that add up to the error, AVG as SUM / n).
 *
 * Grow (shoal_comm_grow) across namespaces: the first ranks of a layout
 * form a communicator, rank 0 hands its grow id through a pipe to the
 * others, which join from their namespaces (one of them a host the parent
 * does not span); the grown communicator sees the layout's hosts and
 * transports and passes the reductions, and the parent still works.
 *
 * Needs root (namespaces); each case is one cmocka test. */
#include "harness.h"

#include "compress_ref.h"
#include "api/compressor.h"

#include "algos/algo.h"
#include "core/comm.h"
#include "base/dtype.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Namespaces shoal_nh<pid>_0..3 and shoal_nh<pid>_br (the bridge's): the
 * test's pid keeps runs from different build directories (make test of
 * build and of a sanitizer build at once) out of each other's way. Device
 * names live inside the namespaces and need no pid. */
#define NS_PREFIX "shoal_nh"
#define NS_MAX 4
#define SUBNET "10.231.78."
#define MAX_RANKS 16
#define CHUNK 4096
#define CHUNK_TEXT "4096"
#define GUARD 64
#define POISON 0xcd
#define CASE_TIMEOUT_S 150 /* every rank of one case; SHOAL_TIMEOUT is 30 s */

/* The algorithm settings every layout runs under. An entry that needs an
 * algorithm this library lacks is left out of the plan, with a note (cmocka
 * reports a skip as "not ok # SKIP", which prove counts as a failure). */
typedef struct {
    const char *algo;  /* SHOAL_ALGO */
    const char *needs; /* an all-reduce algorithm that must exist, or NULL */
} setting_t;

static const setting_t settings[] = {
    {"auto", NULL},
    {"ring", NULL},
    {"allreduce:hier,reducescatter:hier,allgather:hier,broadcast:hier,alltoall:hier", "hier"},
};
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

/* Namespace of each rank, in rank order. */
typedef struct {
    const char *name;
    int nranks;
    int ns_of[MAX_RANKS];
} layout_t;

static const layout_t layouts[] = {
    {"{1,1}", 2, {0, 1}},
    {"{2,2}", 4, {0, 0, 1, 1}},
    {"{1,3}", 4, {0, 1, 1, 1}},
    {"{4,1}", 5, {0, 0, 0, 0, 1}},
    {"{3,1,2}", 6, {0, 0, 0, 1, 2, 2}},
    {"{2,2,2,2}", 8, {0, 0, 1, 1, 2, 2, 3, 3}},
    {"{2,2} interleaved 0101", 4, {0, 1, 0, 1}},
    {"{3,2} interleaved 01100", 5, {0, 1, 1, 0, 0}},
};
#define NLAYOUTS (sizeof(layouts) / sizeof(layouts[0]))

/* Elements per block of the multi-piece count: three pieces and a tail
 * even for one-byte types. The collectives whose count is the whole buffer
 * (all-reduce, broadcast, reduce) take nranks times as many, so that the
 * share of each rank still spans several pieces. */
#define BIG (3 * CHUNK + 5)
static const size_t counts[] = {0, 1, 1001, BIG};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static const struct {
    shoal_dtype_t dt;
    shoal_op_t op;
} reductions[] = {
    {SHOAL_FLOAT32, SHOAL_SUM}, {SHOAL_INT32, SHOAL_MAX},    {SHOAL_FLOAT64, SHOAL_AVG},
    {SHOAL_INT8, SHOAL_MIN},    {SHOAL_BFLOAT16, SHOAL_SUM},
};
#define NREDUCTIONS (sizeof(reductions) / sizeof(reductions[0]))

/* The layouts of the compressed cases: two hosts. */
static const layout_t codec_layouts[] = {
    {"{1,1}", 2, {0, 1}},
    {"{2,2}", 4, {0, 0, 1, 1}},
    {"{3,3}", 6, {0, 0, 0, 1, 1, 1}},
    {"{1,3}", 4, {0, 1, 1, 1}},
};
#define NCODEC_LAYOUTS (sizeof(codec_layouts) / sizeof(codec_layouts[0]))

typedef struct {
    const layout_t *layout;
    const setting_t *setting;
    int codec; /* the compressed all-reduces instead of the collectives */
    int grow_old; /* a grow from the first grow_old ranks to all (0: none) */
    int pipe_fd[2];
} case_t;

/* The grow cases: {2,2} from 3 ranks (the new one beside rank 2), {4,1}
 * from 4 (the new one alone on a new host), {3,1,2} from 2. */
static const struct {
    int layout;
    int old;
} grow_cases[] = {{1, 3}, {3, 4}, {4, 2}};
#define NGROW_CASES (sizeof(grow_cases) / sizeof(grow_cases[0]))

static int topo_ready;

/* ---- topology ------------------------------------------------------------ */

__attribute__((format(printf, 1, 2))) static int sh(const char *fmt, ...)
{
    char cmd[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "# command failed (%d): %s\n", rc, cmd);
    return rc;
}

static char ns_base[32]; /* "shoal_nh<pid>_" */

static void ns_name(char out[48], int i)
{
    if (i < 0)
        snprintf(out, 48, "%sbr", ns_base);
    else
        snprintf(out, 48, "%s%d", ns_base, i);
}

/* Deleting a namespace deletes its devices, and a veth goes with its peer,
 * so namespaces are all there is to remove: this run's, and those of runs
 * whose process is gone (killed before they could clean up). */
static void topo_remove(void)
{
    DIR *dir = opendir("/var/run/netns");
    if (!dir)
        return;
    struct dirent *e;
    while ((e = readdir(dir))) {
        int pid;
        if (sscanf(e->d_name, NS_PREFIX "%d_", &pid) != 1 || pid <= 0)
            continue;
        if (pid != getpid() && (kill(pid, 0) == 0 || errno != ESRCH))
            continue;
        char cmd[320];
        snprintf(cmd, sizeof(cmd), "ip netns del '%s' 2>/dev/null", e->d_name);
        if (system(cmd)) {
            /* Gone already is fine. */
        }
    }
    closedir(dir);
}

/* Namespace i holds veth end shoal_nhv<i> at SUBNET(i+1); its peer
 * shoal_nhp<i> is a port of bridge shoal_nhbr0 in the bridge namespace. */
static int topo_create(void)
{
    char br[48], ns[48];
    snprintf(ns_base, sizeof(ns_base), "%s%d_", NS_PREFIX, (int)getpid());
    topo_remove();
    ns_name(br, -1);
    int rc = sh("ip netns add %s", br) || sh("ip -n %s link add shoal_nhbr0 type bridge", br) ||
             sh("ip -n %s link set shoal_nhbr0 up", br);
    for (int i = 0; i < NS_MAX && !rc; i++) {
        ns_name(ns, i);
        rc = sh("ip netns add %s", ns) ||
             sh("ip -n %s link add shoal_nhp%d type veth peer name shoal_nhv%d netns %s", br, i,
                i, ns) ||
             sh("ip -n %s link set shoal_nhp%d master shoal_nhbr0 up", br, i) ||
             sh("ip -n %s addr add " SUBNET "%d/24 dev shoal_nhv%d", ns, i + 1, i) ||
             sh("ip -n %s link set shoal_nhv%d up", ns, i) || sh("ip -n %s link set lo up", ns);
    }
    return rc;
}

/* ---- inside a rank ------------------------------------------------------- */

typedef struct {
    shoal_comm_t comm;
    int rank, n;
    size_t cap; /* bytes of each buffer, guard included */
    unsigned char *send, *recv, *want, *tmp;
} rank_t;

/* Byte i of the data that rank src sends as block blk of a data-moving
 * collective: distinct per source and block, so a misplaced block shows. */
static void fill_pattern(unsigned char *buf, size_t bytes, int src, int blk)
{
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (unsigned char)harness_mix((uint32_t)src * 0x9e3779b1u ^
                                            (uint32_t)blk * 0x85ebca6bu ^ (uint32_t)i);
}

/* got[0..count) == want element by element, and guard bytes behind got
 * still poisoned when guarded. */
static int check_elems(const rank_t *r, const unsigned char *got, const unsigned char *want,
                       size_t count, shoal_dtype_t dt, int guarded, const char *what)
{
    size_t es = shoal_dtype_bytes(dt);
    for (size_t i = 0; i < count; i++) {
        if (memcmp(got + i * es, want + i * es, es)) {
            unsigned long long g = 0, w = 0;
            memcpy(&g, got + i * es, es);
            memcpy(&w, want + i * es, es);
            RANK_CHECK(0, fail, "rank %d/%d: %s %s: element %zu of %zu is %#llx, want %#llx",
                       r->rank, r->n, what, shoal_dtype_name(dt), i, count, g, w);
        }
    }
    if (!guarded)
        return 0;
    return harness_check_untouched(got, count * es, count * es + GUARD, POISON, r->rank, what);
fail:
    return 1;
}

static int call_ok(const rank_t *r, shoal_status_t s, const char *what, size_t count)
{
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d/%d: %s count %zu: %s (%s)", r->rank, r->n, what, count,
               shoal_status_string(s), shoal_comm_last_error(r->comm));
    return 0;
fail:
    return 1;
}

/* All-reduce, reduce-scatter and reduce of one dtype x op; the input of
 * the out-of-place calls must come back unchanged. */
static int run_reductions(rank_t *r, size_t c, shoal_dtype_t dt, shoal_op_t op)
{
    size_t es = shoal_dtype_bytes(dt), n = (size_t)r->n, me = (size_t)r->rank;
    size_t full = c == BIG ? c * n : c;
    int root = 1 % r->n;
    char what[64];
    for (int in_place = 0; in_place < 2; in_place++) {
        const char *how = in_place ? "in place" : "out of place";

        snprintf(what, sizeof(what), "allreduce %s %s", shoal_op_name(op), how);
        harness_expected(r->want, r->tmp, full, r->n, dt, op);
        harness_fill_exact(r->send, full, r->rank, dt, op);
        memset(r->send + full * es, POISON, GUARD);
        memset(r->recv, POISON, full * es + GUARD);
        unsigned char *out = in_place ? r->send : r->recv;
        if (call_ok(r, shoal_allreduce(r->send, out, full, dt, op, r->comm), what, full) ||
            check_elems(r, out, r->want, full, dt, 1, what))
            return 1;
        harness_fill_exact(r->tmp, full, r->rank, dt, op);
        RANK_CHECK(in_place || !memcmp(r->send, r->tmp, full * es), fail,
                   "rank %d: %s changed its input", r->rank, what);

        snprintf(what, sizeof(what), "reduce_scatter %s %s", shoal_op_name(op), how);
        harness_expected(r->want, r->tmp, n * c, r->n, dt, op);
        harness_fill_exact(r->send, n * c, r->rank, dt, op);
        memset(r->recv, POISON, c * es + GUARD);
        out = in_place ? r->send + me * c * es : r->recv;
        if (call_ok(r, shoal_reduce_scatter(r->send, out, c, dt, op, r->comm), what, c) ||
            check_elems(r, out, r->want + me * c * es, c, dt, !in_place, what))
            return 1;

        snprintf(what, sizeof(what), "reduce %s root %d %s", shoal_op_name(op), root, how);
        harness_expected(r->want, r->tmp, full, r->n, dt, op);
        harness_fill_exact(r->send, full, r->rank, dt, op);
        memset(r->send + full * es, POISON, GUARD);
        memset(r->recv, POISON, full * es + GUARD);
        out = in_place ? r->send : r->recv;
        if (call_ok(r, shoal_reduce(r->send, out, full, dt, op, root, r->comm), what, full))
            return 1;
        if (r->rank == root) {
            if (check_elems(r, out, r->want, full, dt, 1, what))
                return 1;
        } else if (in_place) {
            harness_fill_exact(r->tmp, full, r->rank, dt, op);
            RANK_CHECK(!memcmp(r->send, r->tmp, full * es), fail,
                       "rank %d: %s: a non-root's buffer "
                       "changed",
                       r->rank, what);
        } else if (harness_check_untouched(r->recv, 0, full * es + GUARD, POISON, r->rank,
                                           what)) {
            return 1;
        }
    }
    return 0;
fail:
    return 1;
}

/* All-gather, broadcast, all-to-all, gather and scatter move bytes only;
 * each uses a dtype of its own so that odd byte counts come up. */
static int run_moves(rank_t *r, size_t c)
{
    size_t n = (size_t)r->n, me = (size_t)r->rank;
    size_t full = c == BIG ? c * n : c;
    char what[64];
    for (int in_place = 0; in_place < 2; in_place++) {
        const char *how = in_place ? "in place" : "out of place";
        size_t es = shoal_dtype_bytes(SHOAL_INT32), b = c * es;

        snprintf(what, sizeof(what), "allgather %s", how);
        memset(r->recv, POISON, n * b + GUARD);
        for (size_t j = 0; j < n; j++)
            fill_pattern(r->want + j * b, b, (int)j, 0);
        const unsigned char *in = r->send;
        if (in_place)
            in = memcpy(r->recv + me * b, r->want + me * b, b);
        else
            fill_pattern(r->send, b, r->rank, 0);
        if (call_ok(r, shoal_allgather(in, r->recv, c, SHOAL_INT32, r->comm), what, c) ||
            check_elems(r, r->recv, r->want, n * c, SHOAL_INT32, 1, what))
            return 1;

        es = shoal_dtype_bytes(SHOAL_UINT8);
        const int roots[2] = {0, r->n - 1};
        for (int k = 0; k < 2; k++) {
            int root = roots[k];
            snprintf(what, sizeof(what), "broadcast root %d %s", root, how);
            memset(r->recv, POISON, full * es + GUARD);
            fill_pattern(r->want, full * es, root, 1);
            const void *src = NULL;
            if (r->rank == root && in_place)
                src = memcpy(r->recv, r->want, full * es);
            else if (r->rank == root)
                src = memcpy(r->send, r->want, full * es);
            else if (in_place)
                src = r->recv;
            if (call_ok(r, shoal_broadcast(src, r->recv, full, SHOAL_UINT8, root, r->comm), what,
                        full) ||
                check_elems(r, r->recv, r->want, full, SHOAL_UINT8, 1, what))
                return 1;
        }

        es = shoal_dtype_bytes(SHOAL_BFLOAT16);
        b = c * es;
        snprintf(what, sizeof(what), "alltoall %s", how);
        unsigned char *a2a_in = in_place ? r->recv : r->send;
        memset(r->recv, POISON, n * b + GUARD);
        for (size_t j = 0; j < n; j++) {
            fill_pattern(a2a_in + j * b, b, r->rank, (int)j + 2);
            fill_pattern(r->want + j * b, b, (int)j, r->rank + 2);
        }
        if (call_ok(r, shoal_alltoall(a2a_in, r->recv, c, SHOAL_BFLOAT16, r->comm), what, c) ||
            check_elems(r, r->recv, r->want, n * c, SHOAL_BFLOAT16, 1, what))
            return 1;

        es = shoal_dtype_bytes(SHOAL_FLOAT64);
        b = c * es;
        int root = r->n - 1;
        snprintf(what, sizeof(what), "gather root %d %s", root, how);
        memset(r->recv, POISON, n * b + GUARD);
        for (size_t j = 0; j < n; j++)
            fill_pattern(r->want + j * b, b, (int)j, 40);
        in = r->send;
        void *gout = in_place && r->rank != root ? NULL : r->recv;
        if (in_place && r->rank == root)
            in = memcpy(r->recv + me * b, r->want + me * b, b);
        else
            memcpy(r->send, r->want + me * b, b);
        if (call_ok(r, shoal_gather(in, gout, c, SHOAL_FLOAT64, root, r->comm), what, c))
            return 1;
        if (r->rank == root ? check_elems(r, r->recv, r->want, n * c, SHOAL_FLOAT64, 1, what)
                            : harness_check_untouched(r->recv, 0, n * b + GUARD, POISON,
                                                      r->rank, what))
            return 1;

        es = shoal_dtype_bytes(SHOAL_INT8);
        b = c * es;
        root = r->n / 2;
        snprintf(what, sizeof(what), "scatter root %d %s", root, how);
        memset(r->recv, POISON, b + GUARD);
        for (size_t j = 0; j < n; j++)
            fill_pattern(r->want + j * b, b, root, (int)j + 50);
        const void *sin = NULL;
        unsigned char *sout = r->recv;
        if (r->rank == root) {
            sin = memcpy(r->send, r->want, n * b);
            if (in_place)
                sout = r->send + me * b;
        }
        if (call_ok(r, shoal_scatter(sin, sout, c, SHOAL_INT8, root, r->comm), what, c) ||
            check_elems(r, sout, r->want + me * b, c, SHOAL_INT8, sout == r->recv, what))
            return 1;
    }
    return 0;
}

/* This rank's view of the hosts must be the layout's: one host per
 * namespace, shared memory inside it and tcp across. */
static int check_hosts(const rank_t *r, const layout_t *l, int nns)
{
    shoal_comm_t comm = r->comm;
    RANK_CHECK(comm->team.nhosts == nns, fail, "rank %d: %d hosts seen, want %d", r->rank, comm->team.nhosts,
               nns);
    for (int p = 0; p < r->n; p++) {
        int same = l->ns_of[p] == l->ns_of[r->rank];
        RANK_CHECK((comm->host_of[p] == comm->host_of[r->rank]) == same, fail,
                   "rank %d: rank %d is on host %d, I am on %d", r->rank, p, comm->host_of[p],
                   comm->host_of[r->rank]);
        if (p == r->rank)
            continue;
        const char *want = same ? "shm" : "tcp";
        RANK_CHECK(!strcmp(comm->team.eps[p]->ops->name, want), fail, "rank %d -> %d over %s, want %s",
                   r->rank, p, comm->team.eps[p]->ops->name, want);
    }
    return 0;
fail:
    return 1;
}

/* The compressed all-reduces of this layout (see the header). */
static int run_codec(rank_t *r, int nhosts)
{
    static const size_t ccounts[] = {0, 1, 1001, BIG};
    static const size_t blocks[] = {32, 128};
    shoal_codec_t probe = {.ops = &shoal_codec_int8, .block = 64};
    shoal_coll_args_t args = {.kind = SHOAL_COLL_ALLREDUCE, .count = 1000,
                              .dtype = SHOAL_FLOAT32, .op = SHOAL_SUM, .codec = &probe,
                              .codec_algo = SHOAL_COMPRESS_ALGO_AUTO};
    const shoal_algo_ops_t *a = shoal_codec_algo_select(&r->comm->team, &args);
    /* With one rank on every host the rails are the flat ring, which AUTO
     * takes itself. */
    int hier = r->comm->team.cluster.max_local > 1;
    const char *want = hier ? "hier-codec" : "ring-codec";
    RANK_CHECK(a && !strcmp(a->name, want), fail, "rank %d: AUTO picks %s across hosts, not %s",
               r->rank, a ? a->name : "nothing", want);
    cref_bufs_t b;
    RANK_CHECK(cref_alloc(&b, BIG * (size_t)r->n, r->n), fail, "out of memory");
    for (size_t k = 0; k < sizeof(ccounts) / sizeof(ccounts[0]); k++) {
        b.count = ccounts[k] == BIG ? BIG * (size_t)r->n : ccounts[k];
        for (int tern = 0; tern < 2; tern++) {
            for (size_t bl = 0; bl < sizeof(blocks) / sizeof(blocks[0]); bl++) {
                for (int rd = 0; rd < 2; rd++) {
                    if (!cref_codec_wanted(k, bl, sizeof(blocks) / sizeof(blocks[0]), rd,
                                           r->n))
                        continue;
                    shoal_codec_t c = cref_codec(&b, tern, blocks[bl], rd);
                    if (cref_check(r->comm, r->rank, &b, &c, SHOAL_COMPRESS_ALGO_AUTO,
                                   hier ? CREF_HIER : CREF_RING, nhosts))
                        return 1;
                }
            }
        }
    }
    cref_free(&b);
    return 0;
fail:
    return 1;
}

/* The compressor API across hosts (hier-codec under it, or ring-codec
 * with one rank per host): int8 and ternary with error feedback, 3 steps:
 * every rank gets the same bytes, and the residuals summed over the ranks
 * are the exact sum of the inputs minus the sum of the results. */
static int run_compressor(rank_t *r)
{
    const size_t count = 70001;
    float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float));
    double *gap = calloc(count, sizeof(double));
    RANK_CHECK(x && y && gap, fail, "out of memory");
    static const shoal_compress_kind_t kinds[] = {SHOAL_COMPRESS_INT8, SHOAL_COMPRESS_TERNARY};
    for (int k = 0; k < 2; k++) {
        shoal_compress_options_t o;
        shoal_compress_options_init(&o, kinds[k]);
        shoal_compressor_t comp;
        RANK_CHECK(shoal_compressor_create(r->comm, &o, count, SHOAL_FLOAT32, NULL, &comp) ==
                       SHOAL_OK, fail, "create: %s", shoal_comm_last_error(r->comm));
        memset(gap, 0, count * sizeof(double));
        double most = 0;
        for (int t = 0; t < 3; t++) {
            for (size_t i = 0; i < count; i++) {
                double e = 0;
                for (int q = 0; q < r->n; q++) {
                    uint32_t h = harness_mix((uint32_t)(q * 7919 + t * 104729) ^ (uint32_t)i);
                    float v = ((float)(h >> 8) / 16777216.0f - 0.5f) * (float)(1 + i % 7);
                    e += v;
                    most = fabs(v) > most ? fabs(v) : most;
                    if (q == r->rank)
                        x[i] = v;
                }
                gap[i] += e;
            }
            RANK_CHECK(shoal_allreduce_compressed(comp, x, y, SHOAL_SUM, NULL) == SHOAL_OK, fail,
                       "compressed: %s", shoal_comm_last_error(r->comm));
            RANK_CHECK(harness_same_bytes(r->comm, y, count * sizeof(float)), fail, "ranks differ");
            for (size_t i = 0; i < count; i++)
                gap[i] -= y[i];
        }
        const float *res;
        RANK_CHECK(shoal_compressor_residual(comp, &res) == SHOAL_OK, fail, "residual");
        double *all = malloc(count * sizeof(double));
        RANK_CHECK(all, fail, "out of memory");
        for (size_t i = 0; i < count; i++)
            all[i] = res[i];
        RANK_CHECK(shoal_allreduce(all, all, count, SHOAL_FLOAT64, SHOAL_SUM, r->comm) ==
                       SHOAL_OK, fail, "sum of residuals");
        for (size_t i = 0; i < count; i++)
            RANK_CHECK(fabs(gap[i] - all[i]) <= 1e-5 * most * r->n * 3, fail, "kind %d value %zu: "
                       "inputs - results %g, residuals %g", k, i, gap[i], all[i]);
        free(all);
        RANK_CHECK(shoal_compressor_destroy(comp) == SHOAL_OK, fail, "destroy");
    }
    free(x);
    free(y);
    free(gap);
    return 0;
fail:
    return 1;
}

static int layout_hosts(const layout_t *l)
{
    int nns = 0;
    for (int i = 0; i < l->nranks; i++)
        if (l->ns_of[i] + 1 > nns)
            nns = l->ns_of[i] + 1;
    return nns;
}

/* A grow case's rank: of the parent (it passes the id on) or new. */
static int grow_main(rank_t *r, const shoal_unique_id_t *id, const case_t *tc)
{
    const layout_t *l = tc->layout;
    shoal_comm_t parent = NULL;
    shoal_unique_id_t gid;
    shoal_status_t s;
    if (r->rank < tc->grow_old) {
        close(tc->pipe_fd[0]);
        s = shoal_comm_init(tc->grow_old, id, r->rank, &parent);
        RANK_CHECK(s == SHOAL_OK, fail, "rank %d: parent init: %s", r->rank,
                   shoal_comm_last_error(NULL));
        RANK_CHECK(shoal_comm_grow_id(parent, &gid) == SHOAL_OK, fail, "grow id");
        for (int k = tc->grow_old; r->rank == 0 && k < l->nranks; k++)
            RANK_CHECK(write(tc->pipe_fd[1], &gid, sizeof(gid)) == (ssize_t)sizeof(gid), fail,
                       "pipe");
        close(tc->pipe_fd[1]);
        s = shoal_comm_grow(parent, l->nranks, NULL, -1, &r->comm);
    } else {
        close(tc->pipe_fd[1]);
        RANK_CHECK(read(tc->pipe_fd[0], &gid, sizeof(gid)) == (ssize_t)sizeof(gid), fail,
                   "rank %d: no grow id", r->rank);
        s = shoal_comm_grow(NULL, l->nranks, &gid, r->rank, &r->comm);
    }
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: grow: %s", r->rank,
               shoal_comm_last_error(parent));
    if (check_hosts(r, l, layout_hosts(l)))
        return 1;
    r->cap = (size_t)l->nranks * BIG * 8 + GUARD;
    r->send = malloc(r->cap);
    r->recv = malloc(r->cap);
    r->want = malloc(r->cap);
    r->tmp = malloc(r->cap);
    RANK_CHECK(r->send && r->recv && r->want && r->tmp, fail, "out of memory");
    for (size_t j = 0; j < NREDUCTIONS; j++)
        if (run_reductions(r, BIG, reductions[j].dt, reductions[j].op))
            return 1;
    if (parent) {
        rank_t p = *r;
        p.comm = parent;
        p.n = tc->grow_old;
        if (run_reductions(&p, 1001, SHOAL_FLOAT32, SHOAL_SUM))
            return 1;
        RANK_CHECK(shoal_comm_destroy(parent) == SHOAL_OK, fail, "destroy parent");
    }
    free(r->send), free(r->recv), free(r->want), free(r->tmp);
    RANK_CHECK(shoal_comm_destroy(r->comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static int rank_main(int rank, const shoal_unique_id_t *id, const case_t *tc)
{
    const layout_t *l = tc->layout;
    char ns[48];
    ns_name(ns, l->ns_of[rank]);
    RANK_CHECK(harness_enter_netns(ns) == 0, fail, "rank %d cannot enter %s", rank, ns);
    harness_setenv("SHOAL_HOST_ID", ns);
    harness_setenv("SHOAL_ALGO", tc->setting->algo);
    harness_setenv("SHOAL_TIMEOUT", "30s");
    harness_setenv("SHOAL_CHUNK_SIZE", CHUNK_TEXT);

    rank_t r = {.rank = rank, .n = l->nranks};
    if (tc->grow_old)
        return grow_main(&r, id, tc);
    shoal_status_t s = shoal_comm_init(l->nranks, id, rank, &r.comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: init: %s (%s)", rank, shoal_status_string(s),
               shoal_comm_last_error(NULL));
    if (check_hosts(&r, l, layout_hosts(l)))
        return 1;
    if (tc->codec) {
        if (run_codec(&r, layout_hosts(l)) || run_compressor(&r))
            return 1;
        s = shoal_comm_destroy(r.comm);
        RANK_CHECK(s == SHOAL_OK, fail, "rank %d: destroy: %s", rank, shoal_status_string(s));
        return 0;
    }
    r.cap = (size_t)l->nranks * BIG * 8 + GUARD;
    r.send = malloc(r.cap);
    r.recv = malloc(r.cap);
    r.want = malloc(r.cap);
    r.tmp = malloc(r.cap);
    RANK_CHECK(r.send && r.recv && r.want && r.tmp, fail, "out of memory");
    for (size_t k = 0; k < NCOUNTS; k++) {
        size_t c = counts[k];
        for (size_t j = 0; j < NREDUCTIONS; j++)
            if (run_reductions(&r, c, reductions[j].dt, reductions[j].op))
                return 1;
        if (run_moves(&r, c) || call_ok(&r, shoal_barrier(r.comm), "barrier", c))
            return 1;
    }
    free(r.send);
    free(r.recv);
    free(r.want);
    free(r.tmp);
    s = shoal_comm_destroy(r.comm);
    RANK_CHECK(s == SHOAL_OK, fail, "rank %d: destroy: %s", rank, shoal_status_string(s));
    return 0;
fail:
    return 1;
}

/* ---- the parent ------------------------------------------------------------ */

/* Rank 0's rendezvous listener must live in namespace 0, so the id is made
 * there: this thread steps into it for the id and the forks, then back. The
 * parent's copy of the listener is closed once the ranks hold theirs. */
static int run_case_ranks(const case_t *tc)
{
    const layout_t *l = tc->layout;
    int n = l->nranks, pids[MAX_RANKS];
    if (tc->grow_old && pipe(((case_t *)tc)->pipe_fd) != 0)
        return -1;
    char ns0[48];
    ns_name(ns0, l->ns_of[0]);
    int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0 || harness_enter_netns(ns0) != 0) {
        fprintf(stderr, "# cannot enter %s\n", ns0);
        if (home >= 0)
            close(home);
        return -1;
    }
    shoal_unique_id_t id;
    int have_id = shoal_get_unique_id(&id) == SHOAL_OK;
    int failed = !have_id;
    int forked = 0;
    fflush(NULL);
    for (; !failed && forked < n; forked++) {
        pids[forked] = fork();
        if (pids[forked] == 0) {
            if (forked != 0)
                shoal_bootstrap_listener_withdraw(&id);
            int rc = rank_main(forked, &id, tc);
            fflush(NULL);
            _exit(rc ? 1 : 0);
        }
        failed = pids[forked] < 0;
    }
    if (have_id)
        shoal_bootstrap_listener_withdraw(&id);
    if (setns(home, CLONE_NEWNET) != 0) {
        fprintf(stderr, "# cannot return to the initial network namespace\n");
        failed = 1;
    }
    close(home);
    if (tc->grow_old) {
        close(tc->pipe_fd[0]);
        close(tc->pipe_fd[1]);
    }
    time_t deadline = time(NULL) + CASE_TIMEOUT_S;
    for (int i = 0; i < forked; i++) {
        if (pids[i] <= 0)
            continue;
        time_t left = deadline - time(NULL);
        int rc = harness_wait(pids[i], left > 1 ? (int)left : 1);
        if (rc != 0) {
            fprintf(stderr, "# %s, SHOAL_ALGO=%s: rank %d (in %s%d) failed (%d)\n", l->name,
                    tc->setting->algo, i, ns_base, l->ns_of[i], rc);
            failed = 1;
        }
    }
    return failed ? -1 : 0;
}

static void test_case(void **state)
{
    const case_t *tc = *state;
    assert_true(topo_ready);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = run_case_ranks(tc);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("# %s%s SHOAL_ALGO=%s: %.1f s\n",
           tc->codec ? "compressed " : tc->grow_old ? "grown " : "", tc->layout->name,
           tc->setting->algo,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    assert_int_equal(rc, 0);
}

static int group_setup(void **state)
{
    (void)state;
    topo_ready = topo_create() == 0;
    /* Every rank, and the parent making rank 0's id, binds the veth end
     * of its namespace whatever interfaces the caller's settings name. */
    harness_setenv("SHOAL_SOCKET_IFNAME", NS_PREFIX "v");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    topo_remove();
    return 0;
}

int main(void)
{
#define NCASES (NSETTINGS * NLAYOUTS + NCODEC_LAYOUTS + NGROW_CASES)
    static case_t cases[NCASES];
    static char names[NCASES][160];
    struct CMUnitTest tests[NCASES];
    harness_require_root("network namespaces need CAP_SYS_ADMIN");
    size_t k = 0;
    for (size_t s = 0; s < NSETTINGS; s++) {
        if (settings[s].needs && !shoal_algo_find(SHOAL_COLL_ALLREDUCE, settings[s].needs)) {
            printf("# this library has no '%s' algorithm: SHOAL_ALGO=%s left out\n",
                   settings[s].needs, settings[s].algo);
            continue;
        }
        for (size_t i = 0; i < NLAYOUTS; i++, k++) {
            cases[k] = (case_t){.layout = &layouts[i], .setting = &settings[s]};
            snprintf(names[k], sizeof(names[k]), "%s SHOAL_ALGO=%s", layouts[i].name,
                     settings[s].algo);
            tests[k] = (struct CMUnitTest){.name = names[k], .test_func = test_case,
                                           .initial_state = &cases[k]};
        }
    }
    for (size_t i = 0; i < NCODEC_LAYOUTS; i++, k++) {
        cases[k] = (case_t){.layout = &codec_layouts[i], .setting = &settings[0], .codec = 1};
        snprintf(names[k], sizeof(names[k]), "compressed allreduce %s", codec_layouts[i].name);
        tests[k] = (struct CMUnitTest){.name = names[k], .test_func = test_case,
                                       .initial_state = &cases[k]};
    }
    for (size_t i = 0; i < NGROW_CASES; i++, k++) {
        const layout_t *l = &layouts[grow_cases[i].layout];
        cases[k] = (case_t){.layout = l, .setting = &settings[0], .grow_old = grow_cases[i].old};
        snprintf(names[k], sizeof(names[k]), "grow %s from its first %d ranks", l->name,
                 grow_cases[i].old);
        tests[k] = (struct CMUnitTest){.name = names[k], .test_func = test_case,
                                       .initial_state = &cases[k]};
    }
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return _cmocka_run_group_tests("netns_hosts", tests, k, group_setup, group_teardown);
}
