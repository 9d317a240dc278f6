/* An unchanged MPI program for the MPI door's tests whose every collective
 * call is one the door must pass to MPI unchanged: derived datatypes
 * (contiguous and vector) in MPI_Allreduce (with user ops: MPI's own ops
 * take predefined types alone), MPI_Bcast and MPI_Allgather (as the
 * receive type alone too); user-defined ops (commutative, and one that is
 * not) in MPI_Allreduce and MPI_Reduce; MPI_MINLOC and MPI_MAXLOC on
 * MPI_DOUBLE_INT and MPI_2INT; from 2 ranks, MPI_Allreduce and MPI_Bcast
 * on an intercommunicator. Each result is checked against what every rank
 * can compute alone. The ranks' verdicts reach rank 0 by point-to-point
 * messages, so that the program makes no collective call the door would
 * take. Every rank makes the same number of collective calls; rank 0
 * prints "passthrough_check: ok, N collective calls on every rank", or
 * "passthrough_check: FAILED" after the first wrong value of each rank,
 * and exits 1. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 300      /* ints of the contiguous tests, a multiple of 3 */
#define VEC_N 5    /* vectors of the vector tests */
#define VEC_EXT 11 /* a vector's extent in doubles: 4 blocks of 2, stride 3 */
#define PRIME 1000003LL
#define SENTINEL -1000.0

static int calls; /* collective calls made, the same on every rank */

/* One collective call made: 1 when MPI returned an error. */
static int done(int rank, const char *what, int rc)
{
    calls++;
    if (rc == MPI_SUCCESS)
        return 0;
    fprintf(stderr, "passthrough_check: rank %d: %s returned %d\n", rank, what, rc);
    return 1;
}

static int wrong(int rank, const char *what, int i)
{
    fprintf(stderr, "passthrough_check: rank %d: %s wrong at %d\n", rank, what, i);
    return 1;
}

/* Rank r's value at i: small, so sums stay exact. */
static int val(int r, int i)
{
    return (r * 7 + i * 3) % 5 - 2;
}

/* A sum over triples of ints (MPI_SUM itself is defined on predefined
 * types alone). */
static void tri_sum(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    const int *a = in;
    int *b = inout;
    for (int i = 0; i < 3 * *len; i++)
        b[i] += a[i];
}

/* Offset o of a vector's extent holds data: blocks of 2 at stride 3. */
static int vec_data(int o)
{
    return o % 3 != 2;
}

/* A sum over vectors: their blocks alone, in the vector's layout. */
static void vec_sum(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    const double *a = in;
    double *b = inout;
    for (int p = 0; p < VEC_EXT * *len; p++)
        if (vec_data(p % VEC_EXT))
            b[p] += a[p];
}

/* A commutative user op: a + b + 1, so n contributions give their sum
 * plus n - 1 whatever the order of the reduction. */
static void plus_one(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    const int *a = in;
    int *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = a[i] + b[i] + 1;
}

/* A non-commutative user op on affine maps x -> a x + b (mod PRIME), each
 * a pair of long longs: inout = in o inout, as MPI orders the operands
 * (in from the lower ranks). */
static void compose(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    const long long *f = in;
    long long *g = inout;
    for (int i = 0; i < *len; i++) {
        long long a = f[2 * i] * g[2 * i] % PRIME;
        long long b = (f[2 * i] * g[2 * i + 1] + f[2 * i + 1]) % PRIME;
        g[2 * i] = a;
        g[2 * i + 1] = b;
    }
}

/* Rank r's affine map at i. */
static void affine(int r, int i, long long *a_p, long long *b_p)
{
    *a_p = 2 + (r * 5 + i) % 7;
    *b_p = (r * 3 + i * 11) % 13;
}

/* The maps of ranks 0..size-1 at i composed in rank order. */
static void affine_ref(int size, int i, long long *a_p, long long *b_p)
{
    long long a, b;
    affine(0, i, &a, &b);
    for (int r = 1; r < size; r++) {
        long long c, d;
        affine(r, i, &c, &d);
        b = (a * d + b) % PRIME;
        a = a * c % PRIME;
    }
    *a_p = a;
    *b_p = b;
}

/* Contiguous and vector types in MPI_Allreduce (by user ops), MPI_Bcast
 * and MPI_Allgather. */
static int check_derived(int rank, int size)
{
    int bad = 0;
    MPI_Datatype tri, vec;
    MPI_Op sum3, vsum;
    MPI_Op_create(tri_sum, 1, &sum3);
    MPI_Op_create(vec_sum, 1, &vsum);
    MPI_Type_contiguous(3, MPI_INT, &tri);
    MPI_Type_commit(&tri);
    MPI_Type_vector(4, 2, 3, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    int *in = malloc(N * sizeof(int)), *out = malloc(N * sizeof(int));
    double *v = malloc((size_t)(VEC_N > size ? VEC_N : size) * VEC_EXT * sizeof(double));
    double send[8];

    for (int inplace = 0; inplace < 2; inplace++) {
        for (int i = 0; i < N; i++)
            in[i] = out[i] = val(rank, i);
        bad |= done(rank, "MPI_Allreduce (contiguous)",
                    MPI_Allreduce(inplace ? MPI_IN_PLACE : in, out, N / 3, tri, sum3,
                                  MPI_COMM_WORLD));
        for (int i = 0; i < N && !bad; i++) {
            int want = 0;
            for (int r = 0; r < size; r++)
                want += val(r, i);
            if (out[i] != want)
                bad = wrong(rank, "MPI_Allreduce (contiguous)", i);
        }
    }

    double *w = malloc(VEC_N * VEC_EXT * sizeof(double));
    for (int p = 0; p < VEC_N * VEC_EXT; p++) {
        w[p] = vec_data(p % VEC_EXT) ? val(rank, p) : SENTINEL;
        v[p] = SENTINEL;
    }
    bad |= done(rank, "MPI_Allreduce (vector)", MPI_Allreduce(w, v, VEC_N, vec, vsum,
                                                              MPI_COMM_WORLD));
    for (int p = 0; p < VEC_N * VEC_EXT && !bad; p++) {
        double want = 0;
        for (int r = 0; r < size; r++)
            want += val(r, p);
        if (v[p] != (vec_data(p % VEC_EXT) ? want : SENTINEL))
            bad = wrong(rank, "MPI_Allreduce (vector): data or a gap", p);
    }
    free(w);

    for (int root = 0; root < size; root++) {
        for (int i = 0; i < N; i++)
            in[i] = rank == root ? val(root, i) : -100;
        bad |= done(rank, "MPI_Bcast (contiguous)", MPI_Bcast(in, N / 3, tri, root,
                                                            MPI_COMM_WORLD));
        for (int i = 0; i < N && !bad; i++)
            if (in[i] != val(root, i))
                bad = wrong(rank, "MPI_Bcast (contiguous)", i);

        for (int p = 0; p < VEC_N * VEC_EXT; p++)
            v[p] = rank == root && vec_data(p % VEC_EXT) ? val(root, p) : SENTINEL;
        bad |= done(rank, "MPI_Bcast (vector)", MPI_Bcast(v, VEC_N, vec, root, MPI_COMM_WORLD));
        for (int p = 0; p < VEC_N * VEC_EXT && !bad; p++)
            if (v[p] != (vec_data(p % VEC_EXT) ? val(root, p) : SENTINEL))
                bad = wrong(rank, "MPI_Bcast (vector): data or a gap", p);
    }

    /* One vector from each rank, sent as a vector and as 8 plain doubles:
     * either way it lands in the vector's blocks, the gaps untouched. */
    for (int plain = 0; plain < 2; plain++) {
        double mine[VEC_EXT];
        for (int o = 0, k = 0; o < VEC_EXT; o++) {
            mine[o] = vec_data(o) ? val(rank, o) : SENTINEL;
            if (vec_data(o))
                send[k++] = val(rank, o);
        }
        for (int p = 0; p < size * VEC_EXT; p++)
            v[p] = SENTINEL;
        bad |= done(rank, "MPI_Allgather (vector)",
                    plain ? MPI_Allgather(send, 8, MPI_DOUBLE, v, 1, vec, MPI_COMM_WORLD)
                          : MPI_Allgather(mine, 1, vec, v, 1, vec, MPI_COMM_WORLD));
        for (int p = 0; p < size * VEC_EXT && !bad; p++) {
            int o = p % VEC_EXT;
            if (v[p] != (vec_data(o) ? val(p / VEC_EXT, o) : SENTINEL))
                bad = wrong(rank, plain ? "MPI_Allgather (doubles into vectors)"
                                        : "MPI_Allgather (vector)", p);
        }
    }

    free(in);
    free(out);
    free(v);
    MPI_Type_free(&tri);
    MPI_Type_free(&vec);
    MPI_Op_free(&sum3);
    MPI_Op_free(&vsum);
    return bad;
}

/* User-defined ops in MPI_Allreduce and MPI_Reduce. */
static int check_user_ops(int rank, int size)
{
    int bad = 0;
    MPI_Op plus, comp;
    MPI_Datatype pair;
    MPI_Op_create(plus_one, 1, &plus);
    MPI_Op_create(compose, 0, &comp);
    MPI_Type_contiguous(2, MPI_LONG_LONG, &pair);
    MPI_Type_commit(&pair);
    int *in = malloc(N * sizeof(int)), *out = malloc(N * sizeof(int));
    long long *fin = malloc(2 * N * sizeof(long long)), *fout = malloc(2 * N * sizeof(long long));

    /* root -1: MPI_Allreduce; otherwise MPI_Reduce to that root. */
    for (int root = -1; root < size; root++) {
        for (int i = 0; i < N; i++) {
            in[i] = val(rank, i);
            out[i] = -100;
            affine(rank, i, &fin[2 * i], &fin[2 * i + 1]);
            fout[2 * i] = fout[2 * i + 1] = -1;
        }
        if (root < 0) {
            bad |= done(rank, "MPI_Allreduce (user op)",
                        MPI_Allreduce(in, out, N, MPI_INT, plus, MPI_COMM_WORLD));
            bad |= done(rank, "MPI_Allreduce (non-commutative user op)",
                        MPI_Allreduce(fin, fout, N, pair, comp, MPI_COMM_WORLD));
        } else {
            bad |= done(rank, "MPI_Reduce (user op)",
                        MPI_Reduce(in, out, N, MPI_INT, plus, root, MPI_COMM_WORLD));
            bad |= done(rank, "MPI_Reduce (non-commutative user op)",
                        MPI_Reduce(fin, fout, N, pair, comp, root, MPI_COMM_WORLD));
        }
        if (root >= 0 && rank != root)
            continue;
        for (int i = 0; i < N && !bad; i++) {
            int want = size - 1;
            for (int r = 0; r < size; r++)
                want += val(r, i);
            long long a, b;
            affine_ref(size, i, &a, &b);
            if (out[i] != want)
                bad = wrong(rank, root < 0 ? "MPI_Allreduce (user op)" : "MPI_Reduce (user op)",
                            i);
            else if (fout[2 * i] != a || fout[2 * i + 1] != b)
                bad = wrong(rank, root < 0 ? "MPI_Allreduce (non-commutative user op)"
                                           : "MPI_Reduce (non-commutative user op)", i);
        }
    }

    free(in);
    free(out);
    free(fin);
    free(fout);
    MPI_Type_free(&pair);
    MPI_Op_free(&plus);
    MPI_Op_free(&comp);
    return bad;
}

/* MPI_MINLOC and MPI_MAXLOC on MPI_DOUBLE_INT and MPI_2INT: many ties,
 * which the lowest index wins. */
static int check_loc(int rank, int size)
{
    struct dbl_int {
        double v;
        int i;
    } *din = malloc(N * sizeof(*din)), *dout = malloc(N * sizeof(*dout));
    struct int_int {
        int v;
        int i;
    } *iin = malloc(N * sizeof(*iin)), *iout = malloc(N * sizeof(*iout));
    MPI_Op ops[] = {MPI_MINLOC, MPI_MAXLOC};
    const char *names[] = {"MPI_MINLOC", "MPI_MAXLOC"};
    int bad = 0;

    for (int o = 0; o < 2; o++) {
        for (int i = 0; i < N; i++) {
            din[i].v = val(rank, i) / 2.0;
            din[i].i = (rank * 5 + i) % 4;
            iin[i].v = val(rank, i);
            iin[i].i = rank ^ (i & 3);
        }
        bad |= done(rank, names[o],
                    MPI_Allreduce(din, dout, N, MPI_DOUBLE_INT, ops[o], MPI_COMM_WORLD));
        bad |= done(rank, names[o], MPI_Allreduce(iin, iout, N, MPI_2INT, ops[o], MPI_COMM_WORLD));
        for (int i = 0; i < N && !bad; i++) {
            double dv = val(0, i) / 2.0;
            int di = (0 * 5 + i) % 4, iv = val(0, i), ii = 0 ^ (i & 3);
            for (int r = 1; r < size; r++) {
                double v = val(r, i) / 2.0;
                int k = (r * 5 + i) % 4;
                if ((o == 0 ? v < dv : v > dv) || (v == dv && k < di)) {
                    dv = v;
                    di = k;
                }
                int w = val(r, i), j = r ^ (i & 3);
                if ((o == 0 ? w < iv : w > iv) || (w == iv && j < ii)) {
                    iv = w;
                    ii = j;
                }
            }
            if (dout[i].v != dv || dout[i].i != di)
                bad = wrong(rank, o == 0 ? "MPI_MINLOC on MPI_DOUBLE_INT"
                                         : "MPI_MAXLOC on MPI_DOUBLE_INT", i);
            else if (iout[i].v != iv || iout[i].i != ii)
                bad = wrong(rank, o == 0 ? "MPI_MINLOC on MPI_2INT" : "MPI_MAXLOC on MPI_2INT", i);
        }
    }
    free(din);
    free(dout);
    free(iin);
    free(iout);
    return bad;
}

/* MPI_Allreduce and MPI_Bcast on an intercommunicator between the even
 * and the odd ranks of MPI_COMM_WORLD, on a type and op the door has. */
static int check_inter(int rank, int size)
{
    int color = rank % 2, bad = 0;
    MPI_Comm local, inter;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, color == 0 ? 1 : 0, 99, &inter);
    int *in = malloc(N * sizeof(int)), *out = malloc(N * sizeof(int));

    for (int i = 0; i < N; i++)
        in[i] = val(rank, i);
    bad |= done(rank, "MPI_Allreduce (intercommunicator)",
                MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, inter));
    /* Each group gets the sum of the other's. */
    for (int i = 0; i < N && !bad; i++) {
        int want = 0;
        for (int r = 0; r < size; r++)
            if (r % 2 != color)
                want += val(r, i);
        if (out[i] != want)
            bad = wrong(rank, "MPI_Allreduce (intercommunicator)", i);
    }

    /* World rank 0 broadcasts to the odd ranks. */
    int root = color == 1 ? 0 : rank == 0 ? MPI_ROOT : MPI_PROC_NULL;
    for (int i = 0; i < N; i++)
        out[i] = rank == 0 ? val(0, i) : -100;
    bad |= done(rank, "MPI_Bcast (intercommunicator)", MPI_Bcast(out, N, MPI_INT, root, inter));
    for (int i = 0; i < N && !bad; i++)
        if (out[i] != (color == 1 || rank == 0 ? val(0, i) : -100))
            bad = wrong(rank, "MPI_Bcast (intercommunicator)", i);

    free(in);
    free(out);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&local);
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int bad = check_derived(rank, size);
    bad |= check_user_ops(rank, size);
    bad |= check_loc(rank, size);
    if (size >= 2)
        bad |= check_inter(rank, size);

    int any = bad;
    if (rank == 0) {
        for (int r = 1; r < size; r++) {
            int theirs = 1;
            MPI_Recv(&theirs, 1, MPI_INT, r, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            any |= theirs;
        }
        if (any)
            printf("passthrough_check: FAILED\n");
        else
            printf("passthrough_check: ok, %d collective calls on every rank\n", calls);
    } else {
        MPI_Send(&bad, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return any;
}
