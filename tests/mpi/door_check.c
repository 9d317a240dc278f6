/* An unchanged MPI program for the MPI door's tests: every collective the
 * door serves, blocking and not, on MPI_COMM_WORLD, on a split, a dup and
 * a communicator from MPI_Comm_create; every predefined type with every op
 * MPI allows it, in place and not, counts 0, 1 and odd; roots everywhere;
 * non-blocking calls completed by each of MPI's completion calls, beside
 * MPI's own requests. Each result is checked against what every rank can
 * compute alone, so the program passes on MPI alone and through the door.
 * Prints "door_check: ok" on rank 0, or the first wrong value on the rank
 * that saw it, and exits 1. */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1001

/* A type the program reduces or moves: how to store and load a small
 * integer in it. */
typedef struct {
    MPI_Datatype t;
    const char *name;
    int size, is_signed, is_float, ops; /* ops: bit o for ops[o] */
} type_t;

enum { SUM, PROD, MIN, MAX, LAND, LOR, LXOR, BAND, BOR, BXOR, NOPS };
static const char *op_names[NOPS] = {"sum", "prod", "min", "max", "land",
                                     "lor", "lxor", "band", "bor", "bxor"};
#define ARITH ((1 << SUM) | (1 << PROD) | (1 << MIN) | (1 << MAX))
#define LOGIC ((1 << LAND) | (1 << LOR) | (1 << LXOR))
#define BITS ((1 << BAND) | (1 << BOR) | (1 << BXOR))
#define INTS (ARITH | LOGIC | BITS)

static MPI_Op mpi_op(int o)
{
    const MPI_Op ops[NOPS] = {MPI_SUM,  MPI_PROD, MPI_MIN,  MPI_MAX, MPI_LAND,
                              MPI_LOR,  MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
    return ops[o];
}

static type_t types[] = {
    {MPI_INT8_T, "int8", 1, 1, 0, INTS},
    {MPI_UINT8_T, "uint8", 1, 0, 0, INTS},
    {MPI_INT32_T, "int32", 4, 1, 0, INTS},
    {MPI_UINT32_T, "uint32", 4, 0, 0, INTS},
    {MPI_INT64_T, "int64", 8, 1, 0, INTS},
    {MPI_UINT64_T, "uint64", 8, 0, 0, INTS},
    {MPI_SIGNED_CHAR, "signed char", 1, 1, 0, INTS},
    {MPI_UNSIGNED_CHAR, "unsigned char", 1, 0, 0, INTS},
    {MPI_SHORT, "short", 2, 1, 0, INTS},
    {MPI_UNSIGNED_SHORT, "unsigned short", 2, 0, 0, INTS},
    {MPI_INT, "int", sizeof(int), 1, 0, INTS},
    {MPI_UNSIGNED, "unsigned", sizeof(int), 0, 0, INTS},
    {MPI_LONG, "long", sizeof(long), 1, 0, INTS},
    {MPI_UNSIGNED_LONG, "unsigned long", sizeof(long), 0, 0, INTS},
    {MPI_LONG_LONG, "long long", sizeof(long long), 1, 0, INTS},
    {MPI_UNSIGNED_LONG_LONG, "unsigned long long", sizeof(long long), 0, 0, INTS},
    {MPI_FLOAT, "float", 4, 1, 1, ARITH},
    {MPI_DOUBLE, "double", 8, 1, 2, ARITH},
    {MPI_C_BOOL, "bool", sizeof(_Bool), 0, 0, LOGIC},
    {MPI_BYTE, "byte", 1, 0, 0, BITS},
};
#define NTYPES (int)(sizeof(types) / sizeof(types[0]))

static void put(const type_t *ty, void *buf, size_t i, long long v)
{
    char *p = (char *)buf + i * (size_t)ty->size;
    if (ty->is_float == 1) {
        float f = (float)v;
        memcpy(p, &f, 4);
    } else if (ty->is_float == 2) {
        double d = (double)v;
        memcpy(p, &d, 8);
    } else if (ty->t == MPI_C_BOOL) {
        _Bool b = v != 0;
        memcpy(p, &b, sizeof(b));
    } else {
        uint64_t u = (uint64_t)v;
        memcpy(p, &u, (size_t)ty->size); /* little-endian: the low bytes */
    }
}

static long long get(const type_t *ty, const void *buf, size_t i)
{
    const char *p = (const char *)buf + i * (size_t)ty->size;
    if (ty->is_float == 1) {
        float f;
        memcpy(&f, p, 4);
        return (long long)f;
    }
    if (ty->is_float == 2) {
        double d;
        memcpy(&d, p, 8);
        return (long long)d;
    }
    uint64_t u = 0;
    memcpy(&u, p, (size_t)ty->size);
    int bits = 8 * ty->size;
    if (ty->is_signed && bits < 64 && (u >> (bits - 1)) & 1)
        u |= ~0ull << bits;
    return (long long)u;
}

/* Rank r's value at i for op o: small, so that sums and products stay
 * exact in every type at up to 8 ranks; not negative in unsigned types;
 * 0 or 1 for bool. */
static long long val(const type_t *ty, int o, int r, size_t i)
{
    long long v = (long long)((r * 7 + (int)i * 3 + o) % 5);
    if (ty->t == MPI_C_BOOL)
        return v & 1;
    if (o == PROD)
        return ty->is_signed ? v % 3 - 1 : v % 2 + 1;
    return ty->is_signed ? v - 2 : v;
}

static long long fold(int o, long long a, long long b)
{
    switch (o) {
    case SUM: return a + b;
    case PROD: return a * b;
    case MIN: return b < a ? b : a;
    case MAX: return b > a ? b : a;
    case LAND: return a && b;
    case LOR: return a || b;
    case LXOR: return !a != !b;
    case BAND: return a & b;
    case BOR: return a | b;
    default: return a ^ b;
    }
}

/* The reduction of element i over ranks 0..size-1, in the type (truncated
 * to its width the way the type stores it). */
static long long want_at(const type_t *ty, int o, int size, size_t i)
{
    long long w = val(ty, o, 0, i);
    for (int r = 1; r < size; r++)
        w = fold(o, w, val(ty, o, r, i));
    unsigned char tmp[8];
    put(ty, tmp, 0, w);
    return get(ty, tmp, 0);
}

static int bad_at(int rank, const char *what, const type_t *ty, int o, size_t i, long long got,
                  long long want)
{
    fprintf(stderr, "door_check: rank %d: %s %s %s: element %zu is %lld, want %lld\n", rank,
            what, ty->name, o >= 0 ? op_names[o] : "", i, got, want);
    return 1;
}

typedef struct {
    MPI_Comm c;
    int rank, size;
    char *a, *b; /* N * size elements of 8 bytes each */
} ctx_t;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "door_check: rank %d: ", x->rank);                                 \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

/* Every type x op in MPI_Allreduce (in place and not) and MPI_Reduce (every
 * root, in place on the root); with all 0, int and double only. */
static int check_reductions(ctx_t *x, int all)
{
    const size_t counts[] = {0, 1, N};
    for (int t = 0; t < NTYPES; t++) {
        const type_t *ty = &types[t];
        if (!all && ty->t != MPI_INT && ty->t != MPI_DOUBLE)
            continue;
        for (int o = 0; o < NOPS; o++) {
            if (!(ty->ops & (1 << o)))
                continue;
            for (int k = 0; k < 3; k++) {
                size_t n = counts[k];
                for (int inplace = 0; inplace < 2; inplace++) {
                    for (size_t i = 0; i < n; i++)
                        put(ty, x->a, i, val(ty, o, x->rank, i));
                    if (inplace)
                        memcpy(x->b, x->a, n * (size_t)ty->size);
                    MPI_Allreduce(inplace ? MPI_IN_PLACE : x->a, x->b, (int)n, ty->t, mpi_op(o),
                                  x->c);
                    for (size_t i = 0; i < n; i++)
                        if (get(ty, x->b, i) != want_at(ty, o, x->size, i))
                            return bad_at(x->rank, inplace ? "allreduce in place" : "allreduce",
                                          ty, o, i, get(ty, x->b, i), want_at(ty, o, x->size, i));
                }
            }
            int root = (t + o) % x->size;
            for (size_t i = 0; i < N; i++)
                put(ty, x->a, i, val(ty, o, x->rank, i));
            /* In place on root 0 only: MPICH 4.0's in-place reduce at
             * another root dereferences MPI_IN_PLACE. */
            int inplace = x->rank == root && root == 0 && (t & 1);
            if (inplace)
                memcpy(x->b, x->a, N * (size_t)ty->size);
            MPI_Reduce(inplace ? MPI_IN_PLACE : x->a, x->b, N, ty->t, mpi_op(o), root, x->c);
            for (size_t i = 0; x->rank == root && i < N; i++)
                if (get(ty, x->b, i) != want_at(ty, o, x->size, i))
                    return bad_at(x->rank, "reduce", ty, o, i, get(ty, x->b, i),
                                  want_at(ty, o, x->size, i));
        }
    }
    return 0;
}

/* Reduce-scatter, block and v (equal and unequal counts), in place and not. */
static int check_reduce_scatter(ctx_t *x)
{
    const type_t *ty = &types[10]; /* int */
    int *counts = malloc((size_t)x->size * sizeof(int));
    for (int form = 0; form < 3; form++) {
        int total = 0, before = 0;
        for (int r = 0; r < x->size; r++) {
            counts[r] = form == 2 ? (r * 5 + 3) % 7 : 37;
            before += r < x->rank ? counts[r] : 0;
            total += counts[r];
        }
        for (int inplace = 0; inplace < 2; inplace++) {
            for (int i = 0; i < total; i++)
                put(ty, x->a, (size_t)i, val(ty, SUM, x->rank, (size_t)i));
            if (inplace)
                memcpy(x->b, x->a, (size_t)total * sizeof(int));
            const void *sb = inplace ? MPI_IN_PLACE : x->a;
            if (form == 0)
                MPI_Reduce_scatter_block(sb, x->b, counts[0], MPI_INT, MPI_SUM, x->c);
            else
                MPI_Reduce_scatter(sb, x->b, counts, MPI_INT, MPI_SUM, x->c);
            for (int i = 0; i < counts[x->rank]; i++) {
                long long w = want_at(ty, SUM, x->size, (size_t)(before + i));
                if (get(ty, x->b, (size_t)i) != w) {
                    free(counts);
                    return bad_at(x->rank, form ? "reduce_scatter" : "reduce_scatter_block",
                                  ty, SUM, (size_t)i, get(ty, x->b, (size_t)i), w);
                }
            }
        }
    }
    free(counts);
    return 0;
}

/* The value rank r contributes at i of its block, for the moving calls. */
static long long mv(int r, int i)
{
    return (long long)(r * 1000 + i) % 30000;
}

/* Broadcast, all-gather, all-to-all(v), gather, scatter of short (a type
 * the door moves as bytes) and double. */
static int check_moves(ctx_t *x)
{
    const type_t *tys[] = {&types[8], &types[17]};
    int n = x->size, me = x->rank;
    for (int t = 0; t < 2; t++) {
        const type_t *ty = tys[t];
        size_t es = (size_t)ty->size;
        const int m = 29;
        for (int root = 0; root < n; root++) {
            for (int i = 0; i < N; i++)
                put(ty, x->a, (size_t)i, me == root ? mv(root, i) : -1);
            MPI_Bcast(x->a, N, ty->t, root, x->c);
            for (int i = 0; i < N; i++)
                CHECK(get(ty, x->a, (size_t)i) == mv(root, i), "bcast %s root %d at %d",
                      ty->name, root, i);
        }
        for (int inplace = 0; inplace < 2; inplace++) {
            /* all-gather */
            memset(x->b, 0, (size_t)n * m * es);
            for (int i = 0; i < m; i++)
                put(ty, inplace ? x->b : x->a, (size_t)(inplace ? me * m + i : i), mv(me, i));
            MPI_Allgather(inplace ? MPI_IN_PLACE : x->a, m, ty->t, x->b, m, ty->t, x->c);
            for (int r = 0; r < n; r++)
                for (int i = 0; i < m; i++)
                    CHECK(get(ty, x->b, (size_t)(r * m + i)) == mv(r, i),
                          "allgather %s%s from %d at %d", ty->name, inplace ? " in place" : "",
                          r, i);
            /* all-to-all: block j of rank r holds mv(r, j * m + i) */
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++)
                    put(ty, inplace ? x->b : x->a, (size_t)(j * m + i), mv(me, j * m + i));
            MPI_Alltoall(inplace ? MPI_IN_PLACE : x->a, m, ty->t, x->b, m, ty->t, x->c);
            for (int r = 0; r < n; r++)
                for (int i = 0; i < m; i++)
                    CHECK(get(ty, x->b, (size_t)(r * m + i)) == mv(r, me * m + i),
                          "alltoall %s%s from %d at %d", ty->name, inplace ? " in place" : "",
                          r, i);
            /* all-to-all-v: rank r sends (r + j) % 4 elements to rank j */
            int sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0;
            for (int j = 0; j < n; j++) {
                sc[j] = (me + j) % 4;
                sd[j] = so;
                so += sc[j] + 1;
                rc[j] = (j + me) % 4;
                rd[j] = ro;
                ro += rc[j] + 2;
            }
            for (int j = 0; j < n; j++)
                for (int i = 0; i < sc[j]; i++)
                    put(ty, inplace ? x->b : x->a, (size_t)((inplace ? rd[j] : sd[j]) + i),
                        mv(me, j * 10 + i));
            if (inplace) /* in place, each block goes out as much as comes in */
                MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, ty->t, x->b, rc, rd, ty->t, x->c);
            else
                MPI_Alltoallv(x->a, sc, sd, ty->t, x->b, rc, rd, ty->t, x->c);
            for (int r = 0; r < n; r++)
                for (int i = 0; i < rc[r]; i++)
                    CHECK(get(ty, x->b, (size_t)(rd[r] + i)) == mv(r, me * 10 + i),
                          "alltoallv %s%s from %d at %d", ty->name, inplace ? " in place" : "",
                          r, i);
            /* gather and scatter at every root; in place on the root */
            for (int root = 0; root < n; root++) {
                int ip = inplace && me == root;
                for (int i = 0; i < m; i++)
                    put(ty, ip ? x->b : x->a, (size_t)(ip ? root * m + i : i), mv(me, i));
                MPI_Gather(ip ? MPI_IN_PLACE : x->a, m, ty->t, x->b, m, ty->t, root, x->c);
                for (int r = 0; me == root && r < n; r++)
                    for (int i = 0; i < m; i++)
                        CHECK(get(ty, x->b, (size_t)(r * m + i)) == mv(r, i),
                              "gather %s root %d from %d at %d", ty->name, root, r, i);
                for (int j = 0; me == root && j < n; j++)
                    for (int i = 0; i < m; i++)
                        put(ty, x->a, (size_t)(j * m + i), mv(j + 100, i));
                MPI_Scatter(x->a, m, ty->t, ip ? MPI_IN_PLACE : x->b, m, ty->t, root, x->c);
                const char *got = ip ? x->a + (size_t)root * m * es : x->b;
                for (int i = 0; i < m; i++)
                    CHECK(get(ty, got, (size_t)i) == mv(me + 100, i),
                          "scatter %s root %d at %d", ty->name, root, i);
            }
        }
    }
    MPI_Barrier(x->c);
    return 0;
}

/* Non-blocking calls, several in flight, completed in every way MPI
 * offers, beside MPI's own requests (a point-to-point pair and a call the
 * door passes to MPI). */
enum { NB = 6 };
static int check_nonblocking(ctx_t *x)
{
    int n = x->size, me = x->rank;
    static int ia[NB][N], ib[NB][N];
    short sa[N], sb[N];
    int ring_out = me, ring_in = -1;
    for (int way = 0; way < 8; way++) {
        MPI_Request rq[NB + 3];
        int nr = 0;
        for (int k = 0; k < NB; k++)
            for (int i = 0; i < N; i++)
                ia[k][i] = (int)val(&types[10], SUM, me + k, (size_t)i);
        MPI_Iallreduce(ia[0], ib[0], N, MPI_INT, MPI_SUM, x->c, &rq[nr++]);
        MPI_Iallreduce(MPI_IN_PLACE, ia[1], N, MPI_INT, MPI_MAX, x->c, &rq[nr++]);
        for (int i = 0; i < N; i++)
            ib[2][i] = me == way % n ? i : -1;
        MPI_Ibcast(ib[2], N, MPI_INT, way % n, x->c, &rq[nr++]);
        MPI_Iallgather(ia[3], 3, MPI_INT, ib[3], 3, MPI_INT, x->c, &rq[nr++]);
        MPI_Ibarrier(x->c, &rq[nr++]);
        MPI_Ireduce_scatter_block(ia[5], ib[5], 2, MPI_INT, MPI_SUM, x->c, &rq[nr++]);
        /* MPI's own: a 16-bit sum (passed through) and a ring exchange. */
        for (int i = 0; i < N; i++)
            sa[i] = (short)(me + i % 7);
        MPI_Iallreduce(sa, sb, N, MPI_SHORT, MPI_SUM, x->c, &rq[nr++]);
        MPI_Irecv(&ring_in, 1, MPI_INT, (me + n - 1) % n, 7, x->c, &rq[nr++]);
        MPI_Isend(&ring_out, 1, MPI_INT, (me + 1) % n, 7, x->c, &rq[nr++]);
        int freed = 0;
        if (way == 6) {
            /* Erroneous for a collective's request (MPI 4.0 §6.12): the
             * MPIs refuse it (Open MPI through MPI_COMM_WORLD's handler),
             * though one may let a cancel of a finished call pass; the
             * request must then complete as usual. */
            MPI_Comm_set_errhandler(x->c, MPI_ERRORS_RETURN);
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            MPI_Cancel(&rq[0]);
            MPI_Request_free(&rq[2]);
            freed = rq[2] == MPI_REQUEST_NULL;
            MPI_Comm_set_errhandler(x->c, MPI_ERRORS_ARE_FATAL);
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        }
        int left = nr, flag, idx, outs[NB + 3];
        MPI_Status st[NB + 3];
        switch (way) {
        case 0: MPI_Waitall(nr, rq, st); break;
        case 1:
            while (left > 0) {
                MPI_Waitany(nr, rq, &idx, &st[0]);
                CHECK(idx != MPI_UNDEFINED, "waitany gave no request");
                left--;
            }
            break;
        case 2:
            while (left > 0) {
                int got;
                MPI_Waitsome(nr, rq, &got, outs, st);
                CHECK(got > 0, "waitsome gave %d", got);
                left -= got;
            }
            break;
        case 3:
            do
                MPI_Testall(nr, rq, &flag, st);
            while (!flag);
            break;
        case 4:
            while (left > 0) {
                MPI_Testany(nr, rq, &idx, &flag, &st[0]);
                left -= flag && idx != MPI_UNDEFINED;
            }
            break;
        case 5:
            while (left > 0) {
                int got;
                MPI_Testsome(nr, rq, &got, outs, st);
                left -= got;
            }
            break;
        case 6:
            for (int k = nr - 1; k >= 0; k--) {
                MPI_Wait(&rq[k], &st[0]);
            }
            break;
        default:
            for (int k = 0; k < nr; k++) {
                do
                    MPI_Request_get_status(rq[k], &flag, &st[0]);
                while (!flag);
                do
                    MPI_Test(&rq[k], &flag, &st[0]);
                while (!flag);
            }
        }
        for (int k = 0; k < nr; k++)
            CHECK(rq[k] == MPI_REQUEST_NULL, "way %d: request %d still live", way, k);
        for (int i = 0; i < N; i++) {
            long long s = 0, mx = -100;
            for (int r = 0; r < n; r++) {
                s += val(&types[10], SUM, r, (size_t)i);
                long long v = val(&types[10], SUM, r + 1, (size_t)i);
                mx = v > mx ? v : mx;
            }
            CHECK(ib[0][i] == s, "way %d: iallreduce sum at %d: %d, want %lld", way, i,
                  ib[0][i], s);
            CHECK(ia[1][i] == mx, "way %d: iallreduce max in place at %d", way, i);
            CHECK(freed || ib[2][i] == i, "way %d: ibcast at %d", way, i);
            int ss = 0;
            for (int r = 0; r < n; r++)
                ss += r + i % 7;
            CHECK(sb[i] == ss, "way %d: passed-through iallreduce at %d", way, i);
        }
        for (int r = 0; r < n; r++)
            for (int i = 0; i < 3; i++)
                CHECK(ib[3][r * 3 + i] == val(&types[10], SUM, r + 3, (size_t)i),
                      "way %d: iallgather from %d at %d", way, r, i);
        for (int i = 0; i < 2; i++) {
            long long s = 0;
            for (int r = 0; r < n; r++)
                s += val(&types[10], SUM, r + 5, (size_t)(me * 2 + i));
            CHECK(ib[5][i] == s, "way %d: ireduce_scatter_block at %d", way, i);
        }
        CHECK(ring_in == (me + n - 1) % n, "way %d: point-to-point got %d", way, ring_in);
    }
    /* The other non-blocking forms, one each. */
    MPI_Request rq[6];
    for (int i = 0; i < n * 4; i++)
        ia[0][i] = me * 100 + i;
    MPI_Ireduce(ia[0], ib[0], 4, MPI_INT, MPI_SUM, 0, x->c, &rq[0]);
    int cnt[64], dsp[64];
    for (int j = 0; j < n; j++) {
        cnt[j] = 2;
        dsp[j] = 2 * j;
    }
    MPI_Ialltoall(ia[0], 2, MPI_INT, ib[1], 2, MPI_INT, x->c, &rq[1]);
    MPI_Ialltoallv(ia[0], cnt, dsp, MPI_INT, ib[2], cnt, dsp, MPI_INT, x->c, &rq[2]);
    MPI_Igather(ia[0], 3, MPI_INT, ib[3], 3, MPI_INT, n - 1, x->c, &rq[3]);
    MPI_Iscatter(ia[0], 1, MPI_INT, ib[4], 1, MPI_INT, 0, x->c, &rq[4]);
    int rsc[64], before = 0, total = 0;
    for (int j = 0; j < n; j++) {
        rsc[j] = j % 3 + 1;
        before += j < me ? rsc[j] : 0;
        total += rsc[j];
    }
    MPI_Ireduce_scatter(ia[0], ib[5], rsc, MPI_INT, MPI_MAX, x->c, &rq[5]);
    MPI_Status sts[6];
    MPI_Waitall(6, rq, sts);
    for (int i = 0; me == 0 && i < 4; i++)
        CHECK(ib[0][i] == 100 * n * (n - 1) / 2 + n * i, "ireduce at %d", i);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 2; i++) {
            CHECK(ib[1][r * 2 + i] == r * 100 + me * 2 + i, "ialltoall from %d", r);
            CHECK(ib[2][r * 2 + i] == r * 100 + me * 2 + i, "ialltoallv from %d", r);
            CHECK(me != n - 1 || ib[3][r * 3 + i] == r * 100 + i, "igather from %d", r);
        }
    CHECK(ib[4][0] == me, "iscatter got %d", ib[4][0]);
    for (int i = 0; i < rsc[me]; i++)
        CHECK(ib[5][i] == (n - 1) * 100 + before + i, "ireduce_scatter at %d: %d", i, ib[5][i]);
    CHECK(total <= 4 * n, "counts");
    return 0;
}

/* all: every type x op (on MPI_COMM_WORLD); the other communicators run
 * int and double, which reach the same code. */
static int check_comm(MPI_Comm c, int all)
{
    ctx_t x = {.c = c};
    MPI_Comm_rank(c, &x.rank);
    MPI_Comm_size(c, &x.size);
    x.a = calloc((size_t)N * 8 * (size_t)x.size, 1);
    x.b = calloc((size_t)N * 8 * (size_t)x.size, 1);
    int bad = check_reductions(&x, all) || check_reduce_scatter(&x) || check_moves(&x) ||
              check_nonblocking(&x);
    free(x.a);
    free(x.b);
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, bad;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bad = check_comm(MPI_COMM_WORLD, 1);
    MPI_Comm half, dup, odd;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &half);
    MPI_Comm_dup(half, &dup);
    bad |= check_comm(half, 0);
    /* Freed first, with the dup made from it still to come. */
    MPI_Comm_free(&half);
    bad |= check_comm(dup, 0);
    MPI_Comm_free(&dup);
    MPI_Group world, odds;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int ranks[64], n = 0;
    for (int r = size - 1; r >= 0; r -= 2)
        ranks[n++] = r;
    MPI_Group_incl(world, n, ranks, &odds);
    MPI_Comm_create(MPI_COMM_WORLD, odds, &odd);
    if (odd != MPI_COMM_NULL) {
        bad |= check_comm(odd, 0);
        MPI_Comm_free(&odd);
    }
    MPI_Group_free(&odds);
    MPI_Group_free(&world);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("door_check: %s\n", any ? "FAILED" : "ok");
    MPI_Finalize();
    return any;
}
