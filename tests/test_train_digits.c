/* Training quality of the compressed all-reduce (include/shoal.h,
 * shoal_allreduce_compressed): data-parallel SGD of a small network on the
 * scikit-learn digits data set, with the gradients all-reduced by shoal.
 *
 * Data: Debian's python3-sklearn ships the set as a gzipped CSV (1797 rows
 * of 64 pixels 0..16, then the label 0..9), read here with zlib; a missing
 * file fails the test, since CI installs the package. Pixels are scaled to
 * [0, 1]; a fixed shuffle puts 1497 rows in the training set and 300 in the
 * held-out set.
 *
 * Model and training: an MLP 64-64-10 (ReLU, softmax cross-entropy), 4
 * ranks, 32 samples per rank and step, SGD with momentum 0.9 (v = 0.9 v +
 * g, w -= lr v), lr 0.05, 200 steps. The weights come from the seed (the
 * same on every rank); rank r takes its batches from its shard of the
 * training set (rows r, r + 4, ...), in a new order every pass, drawn from
 * (seed, r). The gradient bucket is one buffer of 64*64 + 64 + 64*10 + 10
 * floats with a layout of four tensors (W1 64x64, b1 1x64, W2 64x10, b2
 * 1x10), all-reduced with SHOAL_AVG. Every variant of a seed sees the same
 * initial weights and batches; only the all-reduce differs:
 * - fp32: plain shoal_allreduce, the reference;
 * - int8 without and with error feedback, ternary with error feedback,
 *   PowerSGD rank 2 with error feedback: one compressor each;
 * - two negative controls, which must do measurably worse, so that the
 *   test can tell broken compression from working compression: a 2-bit
 *   quantisation without error feedback (each rank rounds its gradient to
 *   {-1, 0, +1} x the largest |value| of each block of 64, to nearest,
 *   then a plain all-reduce: the test's own, not a library feature), and
 *   the library's ternary without error feedback.
 * Both ternary variants clip at 2.5 standard deviations, as TernGrad does:
 * with error feedback the clipped part comes back at later steps, without
 * it the clipping's bias stays. (Unclipped ternary without feedback is
 * unbiased and, over 20 seeds, trained as well as fp32 here: 0.994 mean,
 * 1.030 worst; it cannot serve as a control.)
 *
 * Checks, for each of 3 seeds separately (no averaging over seeds): the
 * final training loss (mean cross-entropy over the whole training set)
 * over the fp32 run's is at most 1.02 for int8, 1.01 for int8 with error
 * feedback, 1.05 for ternary and PowerSGD with error feedback; their
 * held-out accuracy is at least fp32's minus one percentage point; the
 * 2-bit control's ratio is at least 1.10 and the ternary control's at least
 * 1.03. After every run the weights are bitwise the same on every rank.
 * A diagnostic table gives every figure. The int8 variant with error
 * feedback also runs over tcp.
 *
 * Checkpoints: a compressor's state saved after 100 steps and restored
 * into a new compressor replays the last 100 steps bit for bit; set_state
 * refuses a buffer of the wrong size and changes nothing; reset behaves
 * like a new compressor. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zlib.h>

#define DIGITS_PATH "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
#define N_ROWS 1797
#define N_TRAIN 1497
#define N_HELD (N_ROWS - N_TRAIN)
#define SPLIT_SEED 20240607u

#define N_IN 64
#define N_HID 64
#define N_OUT 10
/* The bucket: W1 (N_IN x N_HID), b1, W2 (N_HID x N_OUT), b2, row-major. */
#define OFF_W1 0
#define OFF_B1 (OFF_W1 + N_IN * N_HID)
#define OFF_W2 (OFF_B1 + N_HID)
#define OFF_B2 (OFF_W2 + N_HID * N_OUT)
#define N_PARAM (OFF_B2 + N_OUT)

#define NRANKS 4
#define BATCH 32
#define STEPS 200
#define LR 0.05f
#define MOMENTUM 0.9f
#define CONTROL_BLOCK 64

#define NSEEDS 3
static const uint64_t seeds[NSEEDS] = {1, 2, 3};

typedef struct {
    float x[N_ROWS][N_IN]; /* rows [0, N_TRAIN) train, the rest held out */
    int y[N_ROWS];
} digits_t;

/* Loaded once by the parent before it forks the ranks. */
static digits_t *digits;

/* ---- random numbers ---------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    return (double)(splitmix64(s) >> 11) * 0x1p-53;
}

/* A uniform index below n (n small: the bias of the multiply is nil). */
static size_t draw_below(uint64_t *s, size_t n)
{
    return (size_t)(uniform01(s) * (double)n);
}

static void shuffle(int *v, size_t n, uint64_t *s)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = draw_below(s, i);
        int t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* ---- data -------------------------------------------------------------- */

/* Parse one CSV row of 64 pixels and a label; 0 on success. */
static int parse_row(const char *line, float *x, int *y)
{
    const char *p = line;
    for (int i = 0; i <= N_IN; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > (i < N_IN ? 16 : 9))
            return -1;
        if (i < N_IN) {
            if (*end != ',')
                return -1;
            x[i] = (float)v / 16.0f;
        } else {
            if (*end != '\n' && *end != '\r' && *end != '\0')
                return -1;
            *y = (int)v;
        }
        p = end + 1;
    }
    return 0;
}

/* Read the data set and split it; fails the test with the reason. */
static void load_digits(void)
{
    if (digits)
        return;
    gzFile f = gzopen(DIGITS_PATH, "rb");
    if (!f)
        fail_msg("cannot open the digits data set %s: install python3-sklearn "
                 "(scripts/install-deps.sh)", DIGITS_PATH);
    digits_t *raw = malloc(sizeof(*raw));
    digits_t *d = malloc(sizeof(*d));
    assert_non_null(raw);
    assert_non_null(d);
    char line[1024];
    int n = 0;
    while (gzgets(f, line, sizeof(line))) {
        if (n == N_ROWS || parse_row(line, raw->x[n], &raw->y[n])) {
            gzclose(f);
            fail_msg("%s: line %d is not 64 pixels 0..16 and a label 0..9 (or there are "
                     "more than %d rows)", DIGITS_PATH, n + 1, N_ROWS);
        }
        n++;
    }
    gzclose(f);
    if (n != N_ROWS)
        fail_msg("%s: %d rows, want %d", DIGITS_PATH, n, N_ROWS);
    int order[N_ROWS];
    for (int i = 0; i < N_ROWS; i++)
        order[i] = i;
    uint64_t s = SPLIT_SEED;
    shuffle(order, N_ROWS, &s);
    for (int i = 0; i < N_ROWS; i++) {
        memcpy(d->x[i], raw->x[order[i]], sizeof(d->x[i]));
        d->y[i] = raw->y[order[i]];
    }
    free(raw);
    digits = d;
}

/* Rank's sample indices for every step: its shard of the training set, in
 * a new order drawn from (seed, rank) on every pass. */
static void make_batches(int *batches, uint64_t seed, int rank)
{
    int shard[N_TRAIN / NRANKS + 1];
    size_t n = 0;
    for (int i = rank; i < N_TRAIN; i += NRANKS)
        shard[n++] = i;
    uint64_t s = seed * 0x2545f4914f6cdd1dull + (uint64_t)rank * 0x632be59bd9b4e019ull;
    size_t pos = n;
    for (size_t k = 0; k < (size_t)STEPS * BATCH; k++) {
        if (pos == n) {
            shuffle(shard, n, &s);
            pos = 0;
        }
        batches[k] = shard[pos++];
    }
}

/* ---- the model --------------------------------------------------------- */

/* He-uniform for the ReLU layer, Glorot-uniform for the output layer,
 * zero biases. */
static void init_weights(float *w, uint64_t seed)
{
    uint64_t s = seed ^ 0xd1b54a32d192ed03ull;
    double a1 = sqrt(6.0 / N_IN), a2 = sqrt(6.0 / (N_HID + N_OUT));
    memset(w, 0, N_PARAM * sizeof(float));
    for (int i = 0; i < N_IN * N_HID; i++)
        w[OFF_W1 + i] = (float)((2 * uniform01(&s) - 1) * a1);
    for (int i = 0; i < N_HID * N_OUT; i++)
        w[OFF_W2 + i] = (float)((2 * uniform01(&s) - 1) * a2);
}

/* Forward pass of row r: hidden activations h, class probabilities p;
 * returns the sample's cross-entropy. */
static double forward(const float *w, int r, float *h, float *p)
{
    const float *x = digits->x[r];
    for (int j = 0; j < N_HID; j++)
        h[j] = w[OFF_B1 + j];
    for (int i = 0; i < N_IN; i++) {
        float xi = x[i];
        if (xi == 0.0f)
            continue;
        const float *row = w + OFF_W1 + i * N_HID;
        for (int j = 0; j < N_HID; j++)
            h[j] += xi * row[j];
    }
    for (int j = 0; j < N_HID; j++)
        h[j] = h[j] > 0.0f ? h[j] : 0.0f;
    float z[N_OUT];
    for (int k = 0; k < N_OUT; k++)
        z[k] = w[OFF_B2 + k];
    for (int j = 0; j < N_HID; j++) {
        const float *row = w + OFF_W2 + j * N_OUT;
        for (int k = 0; k < N_OUT; k++)
            z[k] += h[j] * row[k];
    }
    float m = z[0];
    for (int k = 1; k < N_OUT; k++)
        m = z[k] > m ? z[k] : m;
    double sum = 0;
    for (int k = 0; k < N_OUT; k++) {
        p[k] = expf(z[k] - m);
        sum += p[k];
    }
    for (int k = 0; k < N_OUT; k++)
        p[k] = (float)(p[k] / sum);
    return log(sum) + m - z[digits->y[r]];
}

/* g = the gradient of the mean cross-entropy over the batch rows idx. */
static void gradient(const float *w, const int *idx, int n, float *g)
{
    memset(g, 0, N_PARAM * sizeof(float));
    for (int b = 0; b < n; b++) {
        int r = idx[b];
        float h[N_HID], p[N_OUT], dz[N_OUT], dh[N_HID];
        forward(w, r, h, p);
        for (int k = 0; k < N_OUT; k++)
            dz[k] = (p[k] - (k == digits->y[r] ? 1.0f : 0.0f)) / (float)n;
        for (int j = 0; j < N_HID; j++) {
            float *grow = g + OFF_W2 + j * N_OUT;
            const float *wrow = w + OFF_W2 + j * N_OUT;
            float acc = 0;
            for (int k = 0; k < N_OUT; k++) {
                grow[k] += h[j] * dz[k];
                acc += wrow[k] * dz[k];
            }
            dh[j] = h[j] > 0.0f ? acc : 0.0f;
        }
        for (int k = 0; k < N_OUT; k++)
            g[OFF_B2 + k] += dz[k];
        for (int j = 0; j < N_HID; j++)
            g[OFF_B1 + j] += dh[j];
        const float *x = digits->x[r];
        for (int i = 0; i < N_IN; i++) {
            if (x[i] == 0.0f)
                continue;
            float *grow = g + OFF_W1 + i * N_HID;
            for (int j = 0; j < N_HID; j++)
                grow[j] += x[i] * dh[j];
        }
    }
}

/* Mean cross-entropy over the training set, accuracy (%) on the held-out
 * set. */
static void evaluate(const float *w, double *loss_p, double *acc_p)
{
    float h[N_HID], p[N_OUT];
    double loss = 0;
    for (int r = 0; r < N_TRAIN; r++)
        loss += forward(w, r, h, p);
    int correct = 0;
    for (int r = N_TRAIN; r < N_ROWS; r++) {
        forward(w, r, h, p);
        int best = 0;
        for (int k = 1; k < N_OUT; k++)
            best = p[k] > p[best] ? k : best;
        correct += best == digits->y[r];
    }
    *loss_p = loss / N_TRAIN;
    *acc_p = 100.0 * correct / N_HELD;
}

/* ---- variants ---------------------------------------------------------- */

typedef enum {
    V_FP32,
    V_INT8,
    V_INT8_EF,
    V_TERNARY_EF,
    V_POWERSGD_EF,
    V_CONTROL_2BIT,
    V_CONTROL_TERNARY,
    NVARIANTS
} variant_t;

typedef struct {
    const char *name;
    int compressed;            /* through a compressor */
    shoal_compress_kind_t kind;
    int error_feedback;
    double bound;              /* loss / fp32 loss at most (controls: at least) */
    int control;
} variant_desc_t;

static const variant_desc_t variants[NVARIANTS] = {
    [V_FP32] = {.name = "fp32"},
    [V_INT8] = {.name = "int8", .compressed = 1, .kind = SHOAL_COMPRESS_INT8, .bound = 1.02},
    [V_INT8_EF] = {.name = "int8+ef", .compressed = 1, .kind = SHOAL_COMPRESS_INT8,
                   .error_feedback = 1, .bound = 1.01},
    [V_TERNARY_EF] = {.name = "ternary+ef", .compressed = 1, .kind = SHOAL_COMPRESS_TERNARY,
                      .error_feedback = 1, .bound = 1.05},
    [V_POWERSGD_EF] = {.name = "powersgd-r2+ef", .compressed = 1,
                       .kind = SHOAL_COMPRESS_POWERSGD, .error_feedback = 1, .bound = 1.05},
    [V_CONTROL_2BIT] = {.name = "control 2-bit", .bound = 1.10, .control = 1},
    [V_CONTROL_TERNARY] = {.name = "control ternary", .compressed = 1,
                           .kind = SHOAL_COMPRESS_TERNARY, .bound = 1.03, .control = 1},
};

static const size_t layout_rows[] = {N_IN, 1, N_HID, 1};
static const size_t layout_cols[] = {N_HID, N_HID, N_OUT, N_OUT};
static const shoal_compress_layout_t layout = {.ntensors = 4, .rows = layout_rows,
                                               .cols = layout_cols};

static shoal_status_t make_compressor(shoal_comm_t comm, variant_t v, uint64_t seed,
                                      shoal_compressor_t *comp_p)
{
    shoal_compress_options_t o;
    shoal_status_t s = shoal_compress_options_init(&o, variants[v].kind);
    if (s != SHOAL_OK)
        return s;
    o.error_feedback = variants[v].error_feedback;
    o.seed = seed;
    if (variants[v].kind == SHOAL_COMPRESS_POWERSGD)
        o.rank = 2;
    /* Ternary as TernGrad runs it: gradients clipped at 2.5 standard
     * deviations (with error feedback the clipped part comes back). */
    if (variants[v].kind == SHOAL_COMPRESS_TERNARY)
        o.clip_sigma = 2.5f;
    return shoal_compressor_create(comm, &o, N_PARAM, SHOAL_FLOAT32, &layout, comp_p);
}

/* The 2-bit control: each block of CONTROL_BLOCK values becomes
 * {-1, 0, +1} x its largest |value|, rounded to nearest. */
static void quantise_2bit(float *g)
{
    for (size_t s = 0; s < N_PARAM; s += CONTROL_BLOCK) {
        size_t e = s + CONTROL_BLOCK < N_PARAM ? s + CONTROL_BLOCK : N_PARAM;
        float m = 0;
        for (size_t i = s; i < e; i++)
            m = fabsf(g[i]) > m ? fabsf(g[i]) : m;
        for (size_t i = s; i < e; i++)
            g[i] = m > 0 ? roundf(g[i] / m) * m : 0.0f;
    }
}

/* One rank's training state. */
typedef struct {
    float w[N_PARAM], v[N_PARAM], g[N_PARAM];
    int batches[STEPS * BATCH];
} trainer_t;

/* Steps [from, to) of variant v (comp: its compressor, or NULL); returns the
 * status of the first failing call. */
static shoal_status_t train_steps(shoal_comm_t comm, trainer_t *t, variant_t v,
                                  shoal_compressor_t comp, int from, int to)
{
    for (int step = from; step < to; step++) {
        gradient(t->w, t->batches + (size_t)step * BATCH, BATCH, t->g);
        shoal_status_t s;
        if (comp) {
            s = shoal_allreduce_compressed(comp, t->g, t->g, SHOAL_AVG, NULL);
        } else {
            if (v == V_CONTROL_2BIT)
                quantise_2bit(t->g);
            s = shoal_allreduce(t->g, t->g, N_PARAM, SHOAL_FLOAT32, SHOAL_AVG, comm);
        }
        if (s != SHOAL_OK)
            return s;
        for (int i = 0; i < N_PARAM; i++) {
            t->v[i] = MOMENTUM * t->v[i] + t->g[i];
            t->w[i] -= LR * t->v[i];
        }
    }
    return SHOAL_OK;
}

/* 1 when the weights are bitwise the same on every rank. */
static int same_weights(shoal_comm_t comm, const float *w, int nranks)
{
    static float all[NRANKS * N_PARAM];
    if (nranks > NRANKS ||
        shoal_allgather(w, all, N_PARAM, SHOAL_FLOAT32, comm) != SHOAL_OK)
        return 0;
    for (int r = 0; r < nranks; r++)
        if (memcmp(all + (size_t)r * N_PARAM, w, N_PARAM * sizeof(float)))
            return 0;
    return 1;
}

/* ---- the quality test -------------------------------------------------- */

typedef struct {
    int done;
    int status;       /* SHOAL_OK, or the status of the call that failed */
    char what[64];    /* that call */
    double loss, acc;
} run_result_t;

typedef struct {
    const variant_t *list; /* the variants to run, V_FP32 first */
    size_t n;
    run_result_t res[NVARIANTS][NSEEDS]; /* written by rank 0 */
} quality_t;

static int rank_quality(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    quality_t *q = arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    trainer_t *t = malloc(sizeof(*t));
    RANK_CHECK(t, fail, "out of memory");
    for (int k = 0; k < NSEEDS; k++) {
        make_batches(t->batches, seeds[k], rank);
        for (size_t l = 0; l < q->n; l++) {
            variant_t v = q->list[l];
            run_result_t r = {.done = 1, .status = SHOAL_OK};
            shoal_compressor_t comp = NULL;
            init_weights(t->w, seeds[k]);
            memset(t->v, 0, sizeof(t->v));
            if (variants[v].compressed) {
                s = make_compressor(comm, v, seeds[k], &comp);
                if (s != SHOAL_OK) {
                    /* Collective and refused alike on every rank: the
                     * other variants still run. */
                    r.status = s;
                    snprintf(r.what, sizeof(r.what), "shoal_compressor_create");
                    if (rank == 0)
                        q->res[v][k] = r;
                    continue;
                }
            }
            s = train_steps(comm, t, v, comp, 0, STEPS);
            RANK_CHECK(s == SHOAL_OK, fail, "rank %d %s seed %llu: all-reduce: %s (%s)", rank,
                       variants[v].name, (unsigned long long)seeds[k],
                       shoal_status_string(s), shoal_comm_last_error(comm));
            RANK_CHECK(!comp || shoal_compressor_destroy(comp) == SHOAL_OK, fail, "destroy");
            RANK_CHECK(same_weights(comm, t->w, nranks), fail,
                       "rank %d %s seed %llu: the weights differ between ranks", rank,
                       variants[v].name, (unsigned long long)seeds[k]);
            evaluate(t->w, &r.loss, &r.acc);
            double figures[2] = {r.loss, r.acc};
            RANK_CHECK(harness_same_bytes(comm, figures, sizeof(figures)), fail,
                       "rank %d %s seed %llu: loss or accuracy differ between ranks", rank,
                       variants[v].name, (unsigned long long)seeds[k]);
            if (rank == 0)
                q->res[v][k] = r;
        }
    }
    free(t);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

/* Run the variants over transport, print the table and check the bounds. */
static void run_quality(const char *transport, const variant_t *list, size_t n)
{
    load_digits();
    quality_t *q = mmap(NULL, sizeof(*q), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    assert_true(q != MAP_FAILED);
    memset(q, 0, sizeof(*q));
    q->list = list;
    q->n = n;
    harness_use_transport(transport, 0);
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    int rc = harness_run_ranks(NRANKS, rank_quality, q, 300);

    int failures = 0;
    printf("# %s: %d ranks, batch %d per rank, %d steps, lr %.2f, momentum %.1f\n", transport,
           NRANKS, BATCH, STEPS, (double)LR, (double)MOMENTUM);
    printf("# %-16s %4s %11s %8s %7s  %s\n", "variant", "seed", "train loss", "ratio",
           "held %", "bound");
    for (size_t l = 0; l < n; l++) {
        variant_t v = list[l];
        const variant_desc_t *d = &variants[v];
        double sum_ratio = 0;
        int nratio = 0;
        for (int k = 0; k < NSEEDS; k++) {
            const run_result_t *r = &q->res[v][k], *ref = &q->res[V_FP32][k];
            if (!r->done || !ref->done || ref->status != SHOAL_OK)
                continue;
            if (r->status != SHOAL_OK) {
                printf("# %-16s %4llu  %s: %s\n", d->name, (unsigned long long)seeds[k],
                       r->what, shoal_status_string((shoal_status_t)r->status));
                failures++;
                continue;
            }
            double ratio = r->loss / ref->loss;
            int bad = 0;
            char bound[48] = "";
            if (v != V_FP32) {
                if (d->control) {
                    bad = !(ratio >= d->bound);
                    snprintf(bound, sizeof(bound), "ratio >= %.2f", d->bound);
                } else {
                    bad = !(ratio <= d->bound) || !(r->acc >= ref->acc - 1.0);
                    snprintf(bound, sizeof(bound), "ratio <= %.2f, held >= %.2f", d->bound,
                             ref->acc - 1.0);
                }
            }
            printf("# %-16s %4llu %11.7f %8.4f %7.2f  %s%s\n", d->name,
                   (unsigned long long)seeds[k], r->loss, ratio, r->acc, bound,
                   bad ? "  FAILED" : "");
            failures += bad;
            sum_ratio += ratio;
            nratio++;
        }
        if (v != V_FP32 && nratio > 0)
            printf("# %-16s mean %11s %8.4f (not checked: the bounds hold per seed)\n", d->name,
                   "", sum_ratio / nratio);
    }
    munmap(q, sizeof(*q));
    assert_int_equal(rc, 0);
    assert_int_equal(failures, 0);
}

static const variant_t all_variants[] = {V_FP32,        V_INT8,         V_INT8_EF,
                                         V_TERNARY_EF,  V_POWERSGD_EF,  V_CONTROL_2BIT,
                                         V_CONTROL_TERNARY};

static void test_quality_shm(void **state)
{
    (void)state;
    run_quality("shm", all_variants, sizeof(all_variants) / sizeof(all_variants[0]));
}

/* Over tcp, against an fp32 run over tcp. */
static void test_int8_ef_tcp(void **state)
{
    (void)state;
    static const variant_t list[] = {V_FP32, V_INT8_EF};
    run_quality("tcp", list, 2);
}

/* ---- checkpoints ------------------------------------------------------- */

#define HALF (STEPS / 2)

static int same_state(shoal_compressor_t a, shoal_compressor_t b, size_t bytes, void *ba,
                      void *bb)
{
    return shoal_compressor_get_state(a, ba, bytes) == SHOAL_OK &&
           shoal_compressor_get_state(b, bb, bytes) == SHOAL_OK && !memcmp(ba, bb, bytes);
}

static int rank_checkpoint(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    const variant_t v = V_INT8_EF;
    const uint64_t seed = seeds[0];
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    trainer_t *t = malloc(sizeof(*t));
    float *w_half = malloc(N_PARAM * sizeof(float)), *v_half = malloc(N_PARAM * sizeof(float));
    float *w_a = malloc(N_PARAM * sizeof(float));
    RANK_CHECK(t && w_half && v_half && w_a, fail, "out of memory");
    make_batches(t->batches, seed, rank);

    /* Run A: 100 steps, save everything, 100 more. */
    shoal_compressor_t c1, c2, c3;
    s = make_compressor(comm, v, seed, &c1);
    RANK_CHECK(s == SHOAL_OK, fail, "create: %s", shoal_status_string(s));
    size_t bytes;
    s = shoal_compressor_state_size(c1, &bytes);
    RANK_CHECK(s == SHOAL_OK && bytes > 0, fail, "state_size: %s, %zu bytes",
               shoal_status_string(s), bytes);
    /* One spare byte for the oversized buffer. */
    unsigned char *saved = malloc(bytes + 1), *st_a = malloc(bytes + 1),
                  *st_b = malloc(bytes + 1);
    RANK_CHECK(saved && st_a && st_b, fail, "out of memory");
    init_weights(t->w, seed);
    memset(t->v, 0, sizeof(t->v));
    s = train_steps(comm, t, v, c1, 0, HALF);
    RANK_CHECK(s == SHOAL_OK, fail, "train: %s", shoal_status_string(s));
    s = shoal_compressor_get_state(c1, saved, bytes);
    RANK_CHECK(s == SHOAL_OK, fail, "get_state: %s", shoal_status_string(s));
    memcpy(w_half, t->w, sizeof(t->w));
    memcpy(v_half, t->v, sizeof(t->v));
    s = train_steps(comm, t, v, c1, HALF, STEPS);
    RANK_CHECK(s == SHOAL_OK, fail, "train: %s", shoal_status_string(s));
    memcpy(w_a, t->w, sizeof(t->w));
    double loss_a, acc_a, loss_b, acc_b;
    evaluate(w_a, &loss_a, &acc_a);

    /* Run B: a new compressor with the saved state replays steps 100..199
     * from the same weights and momentum. */
    s = make_compressor(comm, v, seed, &c2);
    RANK_CHECK(s == SHOAL_OK, fail, "create: %s", shoal_status_string(s));
    s = shoal_compressor_set_state(c2, saved, bytes);
    RANK_CHECK(s == SHOAL_OK, fail, "set_state: %s", shoal_status_string(s));
    RANK_CHECK(same_state(c1, c1, bytes, st_a, st_b), fail, "get_state is not repeatable");
    memcpy(t->w, w_half, sizeof(t->w));
    memcpy(t->v, v_half, sizeof(t->v));
    s = train_steps(comm, t, v, c2, HALF, STEPS);
    RANK_CHECK(s == SHOAL_OK, fail, "replay: %s", shoal_status_string(s));
    evaluate(t->w, &loss_b, &acc_b);
    RANK_CHECK(!memcmp(t->w, w_a, sizeof(t->w)), fail,
               "rank %d: the replayed steps end with other weights (loss %.9g, first run "
               "%.9g)", rank, loss_b, loss_a);
    RANK_CHECK(loss_a == loss_b && acc_a == acc_b, fail, "rank %d: replayed loss %.9g, first %.9g",
               rank, loss_b, loss_a);
    RANK_CHECK(same_state(c1, c2, bytes, st_a, st_b), fail,
               "rank %d: the compressors' states differ after the replay", rank);
    RANK_CHECK(same_weights(comm, t->w, nranks), fail, "rank %d: weights differ between ranks",
               rank);

    /* A wrong-sized state is refused and changes nothing. */
    RANK_CHECK(shoal_compressor_get_state(c2, st_a, bytes) == SHOAL_OK, fail, "get_state");
    memcpy(st_b, saved, bytes);
    st_b[bytes] = 0;
    s = shoal_compressor_set_state(c2, st_b, bytes - 1);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "set_state of %zu bytes of %zu: %s", bytes - 1,
               bytes, shoal_status_string(s));
    s = shoal_compressor_set_state(c2, st_b, bytes + 1);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "set_state of %zu bytes of %zu: %s", bytes + 1,
               bytes, shoal_status_string(s));
    s = shoal_compressor_set_state(c2, st_b, 0);
    RANK_CHECK(s == SHOAL_ERR_INVALID_ARG, fail, "set_state of 0 bytes: %s",
               shoal_status_string(s));
    RANK_CHECK(shoal_compressor_get_state(c2, st_b, bytes) == SHOAL_OK, fail, "get_state");
    RANK_CHECK(!memcmp(st_a, st_b, bytes), fail, "rank %d: a refused set_state changed the state",
               rank);

    /* reset: the state and the training of a new compressor. */
    s = shoal_compressor_reset(c1);
    RANK_CHECK(s == SHOAL_OK, fail, "reset: %s", shoal_status_string(s));
    s = make_compressor(comm, v, seed, &c3);
    RANK_CHECK(s == SHOAL_OK, fail, "create: %s", shoal_status_string(s));
    RANK_CHECK(same_state(c1, c3, bytes, st_a, st_b), fail,
               "rank %d: a reset compressor's state is not a new one's", rank);
    init_weights(t->w, seed);
    memset(t->v, 0, sizeof(t->v));
    s = train_steps(comm, t, v, c1, 0, HALF);
    RANK_CHECK(s == SHOAL_OK, fail, "train after reset: %s", shoal_status_string(s));
    memcpy(w_a, t->w, sizeof(t->w));
    init_weights(t->w, seed);
    memset(t->v, 0, sizeof(t->v));
    s = train_steps(comm, t, v, c3, 0, HALF);
    RANK_CHECK(s == SHOAL_OK, fail, "train with a new compressor: %s", shoal_status_string(s));
    RANK_CHECK(!memcmp(t->w, w_a, sizeof(t->w)), fail,
               "rank %d: training after reset differs from a new compressor's", rank);
    if (rank == 0)
        printf("# checkpoint: %zu bytes of state; loss after %d steps %.6f, replayed from "
               "step %d: %.6f\n", bytes, STEPS, loss_a, HALF, loss_b);

    RANK_CHECK(shoal_compressor_destroy(c1) == SHOAL_OK, fail, "destroy");
    RANK_CHECK(shoal_compressor_destroy(c2) == SHOAL_OK, fail, "destroy");
    RANK_CHECK(shoal_compressor_destroy(c3) == SHOAL_OK, fail, "destroy");
    free(saved);
    free(st_a);
    free(st_b);
    free(w_half);
    free(v_half);
    free(w_a);
    free(t);
    RANK_CHECK(shoal_comm_destroy(comm) == SHOAL_OK, fail, "destroy");
    return 0;
fail:
    return 1;
}

static void test_checkpoint(void **state)
{
    (void)state;
    load_digits();
    harness_use_transport("shm", 0);
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    assert_int_equal(harness_run_ranks(NRANKS, rank_checkpoint, NULL, 120), 0);
}

int main(void)
{
    harness_plain_only("training");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quality_shm),
        cmocka_unit_test(test_int8_ef_tcp),
        cmocka_unit_test(test_checkpoint),
    };
    int rc = cmocka_run_group_tests_name("train_digits", tests, NULL, NULL);
    free(digits);
    return rc;
}
