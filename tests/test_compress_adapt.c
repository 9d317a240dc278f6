/* The adaptive compressor (SHOAL_COMPRESS_ADAPTIVE, shoal.h) over shared
 * memory and tcp, 1..8 ranks, on a bucket whose tensors compress
 * differently (a low-rank matrix, a noisy matrix, a vector with outliers,
 * a small vector):
 *
 * - the statistics of the first choice (no residual yet) are, for every
 *   tensor, the sums over the ranks of what the test computes itself from
 *   every rank's input: the norm, and int8's, int4's and ternary's errors
 *   (the codecs run here, ternary's expectation under the shared scales,
 *   the block maxima over the ranks as bf16 rounded up);
 * - the choice is optimal: an exhaustive search over every combination of
 *   choices, with the same counting of errors in thousandths of the
 *   allowance, finds no fewer bytes within the budget; the reported
 *   choices are the table's, their errors within the budget;
 * - every rank holds the same choices, every result is bitwise the same on
 *   every rank, and choices change only at the first call of a window;
 * - error feedback's identity: the residuals summed over the ranks are the
 *   exact sum of the inputs minus the results, up to fp32 rounding;
 * - two budgets: the tighter one's error is smaller and its bytes more; a
 *   budget below int8's error keeps everything in full precision (the
 *   result is then the exact fp32 sum), and a loose one sends at least 5
 *   times fewer bytes than fp32;
 * - checkpoints: the state saved mid-run (choices, residual, PowerSGD's
 *   Q) restores into a new compressor that replays the rest bit for bit,
 *   across a window's new choice; a state with a choice out of range is
 *   refused and changes nothing; reset returns to full precision;
 * - refusals: budget 0 or NaN, window 0, ADAPTIVE for another collective,
 *   shoal_compressor_choices on another kind or with the wrong count. */
#include "harness.h"

#include "api/compressor.h"
#include "api/compressor_priv.h"
#include "compress/codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_CHUNK 4096
#define STEPS 7
#define WINDOW 3
#define NT 4
#define UNITS 1000

/* The bucket: a 48 x 40 matrix of rank 1 plus 2% noise, a 32 x 24 noisy matrix, a
 * vector of 700 values with an outlier every 97, a vector of 5. */
static const size_t rows[NT] = {48, 32, 1, 1};
static const size_t cols[NT] = {40, 24, 700, 5};
#define COUNT (48 * 40 + 32 * 24 + 700 + 5)

static float noise(int r, size_t i, int t)
{
    uint32_t h = harness_mix((uint32_t)(r * 1000003 + t * 7919) ^ (uint32_t)i * 2654435761u);
    return (float)(h >> 8) / 16777216.0f - 0.5f;
}

/* Rank r's value i at step t. */
static float input(int r, size_t i, int t)
{
    if (i < 48 * 40) {
        size_t a = i / 40, b = i % 40;
        return (0.5f + 0.01f * (float)r) * sinf(0.1f * (float)a + 0.2f * (float)t) *
                   cosf(0.07f * (float)b) +
               0.01f * noise(r + 5, i, t);
    }
    i -= 48 * 40;
    if (i < 32 * 24)
        return noise(r, i, t);
    i -= 32 * 24;
    if (i < 700)
        return i % 97 == 0 ? 40.0f * noise(r + 7, i, t) : 0.1f * noise(r + 3, i, t);
    return noise(r + 11, i, t);
}

static shoal_compressor_t make(shoal_comm_t comm, float budget)
{
    shoal_compress_options_t o;
    shoal_compress_options_init(&o, SHOAL_COMPRESS_ADAPTIVE);
    o.budget = budget;
    o.window = WINDOW;
    o.rank = 2;
    o.seed = 5;
    shoal_compress_layout_t lay = {NT, rows, cols};
    shoal_compressor_t c = NULL;
    return shoal_compressor_create(comm, &o, COUNT, SHOAL_FLOAT32, &lay, &c) == SHOAL_OK ? c
                                                                                         : NULL;
}

static size_t tensor_off(size_t t)
{
    size_t off = 0;
    for (size_t i = 0; i < t; i++)
        off += rows[i] * cols[i];
    return off;
}

/* The test's own statistics of the first choice, summed over the ranks:
 * the norm and the errors of the codecs (the choices of compressor_adapt.c
 * in its order: none, int8/128, int8/64, int8/32, int4/64, ternary/64). */
static void own_stats(int n, size_t t, double *e, double *norm)
{
    static const unsigned blocks[] = {128, 64, 32};
    size_t off = tensor_off(t), cnt = rows[t] * cols[t];
    float *y = malloc(cnt * sizeof(float)), *d = malloc(cnt * sizeof(float));
    unsigned char *w = malloc(cnt * 2 + 1024);
    float *sc = malloc((cnt / 32 + 2) * sizeof(float));
    memset(e, 0, 6 * sizeof(double));
    *norm = 0;
    for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < cnt; i++) {
            y[i] = input(r, off + i, 0);
            *norm += (double)y[i] * y[i];
        }
        for (int k = 0; k < 4; k++) {
            shoal_codec_t cd = {.ops = k < 3 ? &shoal_codec_int8 : &shoal_codec_int4,
                                .block = k < 3 ? blocks[k] : 64, .round = SHOAL_ROUND_NEAREST};
            cd.ops->encode(&cd, w, y, NULL, NULL, cnt, 0);
            cd.ops->decode(&cd, d, w, cnt, 0);
            for (size_t i = 0; i < cnt; i++)
                e[1 + k] += ((double)y[i] - d[i]) * ((double)y[i] - d[i]);
        }
    }
    /* Ternary under the shared scales: each block's largest |value| over
     * the ranks, as bf16 rounded up. */
    memset(sc, 0, (cnt / 32 + 2) * sizeof(float));
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < cnt; i++)
            sc[i / 64] = fmaxf(sc[i / 64], fabsf(input(r, off + i, 0)));
    for (size_t b = 0; b < (cnt + 63) / 64; b++)
        sc[b] = shoal_bf16_to_f32(shoal_comp_scale_bf16_up(sc[b]));
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < cnt; i++) {
            double v = fabs((double)input(r, off + i, 0));
            e[5] += v * (sc[i / 64] - v);
        }
    free(y);
    free(d);
    free(w);
    free(sc);
}

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-300;
}

/* The fewest bytes within the budget, by trying every combination. */
static uint64_t best_bytes(const double *stats, const uint64_t *bytes, size_t nopt,
                           double budget)
{
    size_t w = nopt + 1;
    double total = 0;
    for (size_t t = 0; t < NT; t++)
        total += stats[t * w + nopt];
    double allow = budget * budget * total;
    size_t combos = 1;
    for (size_t t = 0; t < NT; t++)
        combos *= nopt;
    uint64_t best = UINT64_MAX;
    for (size_t c = 0; c < combos; c++) {
        size_t rest = c;
        double units = 0;
        uint64_t b = 0;
        int ok = 1;
        for (size_t t = 0; t < NT; t++) {
            size_t k = rest % nopt;
            rest /= nopt;
            if (k && !bytes[t * nopt + k])
                ok = 0;
            double e = stats[t * w + k];
            units += e <= 0 ? 0 : ceil(e / allow * UNITS);
            b += bytes[t * nopt + k];
        }
        if (ok && units <= UNITS && b < best)
            best = b;
    }
    return best;
}

static uint64_t chosen_bytes(const shoal_compress_choice_t *ch)
{
    uint64_t b = 0;
    for (size_t t = 0; t < NT; t++)
        b += ch[t].bytes;
    return b;
}

/* One budget over STEPS steps, checked as the header says; *bytes_p and
 * *err_p: the last choice's bytes and estimated error. */
static int run_budget(shoal_comm_t comm, int rank, int n, float budget, uint64_t *bytes_p,
                      double *err_p)
{
    float *x = malloc(COUNT * sizeof(float)), *y[STEPS];
    double *sum_in = calloc(COUNT, sizeof(double)), *sum_out = calloc(COUNT, 8);
    double *mag = calloc(COUNT, sizeof(double)), *res_all = calloc(COUNT, 8);
    shoal_compressor_t c = make(comm, budget);
    RANK_CHECK(x && sum_in && sum_out && mag && res_all && c, fail, "create: %s",
               shoal_comm_last_error(comm));
    size_t state_bytes = 0;
    RANK_CHECK(shoal_compressor_state_size(c, &state_bytes) == SHOAL_OK, fail, "state size");
    void *state = malloc(state_bytes);
    shoal_compress_choice_t ch[NT], prev[NT];
    RANK_CHECK(shoal_compressor_choices(c, ch, NT) == SHOAL_OK, fail, "choices");
    for (size_t t = 0; t < NT; t++)
        RANK_CHECK(ch[t].kind == 0 && ch[t].since == 0, fail, "a choice before the first call");
    for (int s = 0; s < STEPS; s++) {
        y[s] = malloc(COUNT * sizeof(float));
        for (size_t i = 0; i < COUNT; i++)
            x[i] = input(rank, i, s);
        memcpy(prev, ch, sizeof(ch));
        shoal_compress_info_t info;
        RANK_CHECK(shoal_allreduce_compressed(c, x, y[s], SHOAL_SUM, &info) == SHOAL_OK, fail,
                   "budget %g step %d: %s", (double)budget, s, shoal_comm_last_error(comm));
        RANK_CHECK(harness_same_bytes(comm, y[s], COUNT * sizeof(float)), fail,
                   "step %d: ranks differ", s);
        RANK_CHECK(shoal_compressor_choices(c, ch, NT) == SHOAL_OK, fail, "choices");
        RANK_CHECK(harness_same_bytes(comm, ch, sizeof(ch)), fail, "the choices differ");
        if (s % WINDOW)
            RANK_CHECK(!memcmp(prev, ch, sizeof(ch)), fail, "a choice changed inside a window");
        RANK_CHECK(info.error <= budget * 1.0001, fail, "estimated error %g over the budget %g",
                   info.error, (double)budget);
        for (size_t t = 0; t < NT; t++)
            RANK_CHECK(ch[t].since % WINDOW == 0 && ch[t].since <= (uint64_t)s, fail,
                       "tensor %zu: since %llu", t, (unsigned long long)ch[t].since);
        const double *stats;
        const uint64_t *bytes;
        size_t nopt;
        RANK_CHECK(shoal_compressor_adapt_table(c, &stats, &bytes, &nopt) == SHOAL_OK, fail,
                   "table");
        if (s % WINDOW == 0) {
            uint64_t best = best_bytes(stats, bytes, nopt, budget);
            RANK_CHECK(chosen_bytes(ch) == best, fail, "budget %g step %d: %llu bytes chosen, "
                       "%llu possible", (double)budget, s,
                       (unsigned long long)chosen_bytes(ch), (unsigned long long)best);
        }
        if (s == 0) {
            for (size_t t = 0; t < NT; t++) {
                double e[6], norm;
                own_stats(n, t, e, &norm);
                RANK_CHECK(close_to(norm, stats[t * (nopt + 1) + nopt]), fail,
                           "tensor %zu: norm %g, not %g", t, stats[t * (nopt + 1) + nopt], norm);
                for (int k = 0; k < 6; k++)
                    RANK_CHECK(close_to(e[k], stats[t * (nopt + 1) + (size_t)k]), fail,
                               "tensor %zu choice %d: error %g, not %g", t, k,
                               stats[t * (nopt + 1) + (size_t)k], e[k]);
            }
        }
        if (s == WINDOW - 1)
            RANK_CHECK(shoal_compressor_get_state(c, state, state_bytes) == SHOAL_OK, fail,
                       "get_state");
        double e_all = 0;
        for (size_t i = 0; i < COUNT; i++) {
            double e = 0;
            for (int r = 0; r < n; r++) {
                e += input(r, i, s);
                mag[i] += fabs(input(r, i, s));
            }
            sum_in[i] += e;
            sum_out[i] += y[s][i];
            mag[i] += fabs(y[s][i]);
            e_all += fabs(y[s][i] - (float)e); /* two floats' sum, rounded once */
        }
        /* Everything in full precision: the exact fp32 sums. */
        int all_plain = 1;
        for (size_t t = 0; t < NT; t++)
            all_plain &= ch[t].kind == 0;
        if (all_plain && n <= 2)
            RANK_CHECK(e_all == 0, fail, "full precision is not exact");
    }
    /* Error feedback's identity. */
    const float *res = NULL;
    RANK_CHECK(shoal_compressor_residual(c, &res) == SHOAL_OK && res, fail, "residual");
    for (size_t i = 0; i < COUNT; i++)
        res_all[i] = res[i];
    RANK_CHECK(shoal_allreduce(res_all, res_all, COUNT, SHOAL_FLOAT64, SHOAL_SUM, comm) ==
                   SHOAL_OK, fail, "residual sum");
    for (size_t i = 0; i < COUNT; i++) {
        double gap = fabs(sum_in[i] - sum_out[i] - res_all[i]);
        RANK_CHECK(gap <= 4e-6 * mag[i] * n + 1e-30, fail, "value %zu: inputs %g - results %g "
                   "!= residuals %g", i, sum_in[i], sum_out[i], res_all[i]);
    }
    *bytes_p = chosen_bytes(ch);
    *err_p = 0;
    {
        shoal_compress_info_t info;
        /* The last estimate, as info reports it. */
        for (size_t i = 0; i < COUNT; i++)
            x[i] = input(rank, i, STEPS);
        RANK_CHECK(shoal_allreduce_compressed(c, x, x, SHOAL_SUM, &info) == SHOAL_OK, fail,
                   "one more step");
        *err_p = info.error;
    }
    /* Replay from the state after step WINDOW - 1, across the window's
     * new choice at step WINDOW. */
    shoal_compressor_t c2 = make(comm, budget);
    RANK_CHECK(c2, fail, "create 2");
    RANK_CHECK(shoal_compressor_set_state(c2, state, state_bytes) == SHOAL_OK, fail, "set");
    for (int s = WINDOW; s < STEPS; s++) {
        for (size_t i = 0; i < COUNT; i++)
            x[i] = input(rank, i, s);
        RANK_CHECK(shoal_allreduce_compressed(c2, x, x, SHOAL_SUM, NULL) == SHOAL_OK, fail,
                   "replay");
        RANK_CHECK(!memcmp(x, y[s], COUNT * sizeof(float)), fail, "budget %g: the replay of "
                   "step %d differs", (double)budget, s);
    }
    RANK_CHECK(shoal_compressor_reset(c2) == SHOAL_OK, fail, "reset");
    RANK_CHECK(shoal_compressor_choices(c2, ch, NT) == SHOAL_OK, fail, "choices");
    for (size_t t = 0; t < NT; t++)
        RANK_CHECK(ch[t].kind == 0 && ch[t].changes == 0, fail, "reset kept a choice");
    shoal_compressor_destroy(c2);
    shoal_compressor_destroy(c);
    for (int s = 0; s < STEPS; s++)
        free(y[s]);
    free(state);
    free(x);
    free(sum_in);
    free(sum_out);
    free(mag);
    free(res_all);
    return 0;
fail:
    return 1;
}

static int rank_budgets(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    uint64_t b_none, b_tight, b_loose;
    double e_none, e_tight, e_loose;
    if (run_budget(comm, rank, n, 1e-8f, &b_none, &e_none) ||
        run_budget(comm, rank, n, 0.02f, &b_tight, &e_tight) ||
        run_budget(comm, rank, n, 0.5f, &b_loose, &e_loose))
        goto fail;
    if (rank == 0)
        printf("# %d ranks: budget 1e-8: %llu B, error %.4g; 0.02: %llu B, error %.4g; "
               "0.5: %llu B, error %.4g\n", n, (unsigned long long)b_none, e_none,
               (unsigned long long)b_tight, e_tight, (unsigned long long)b_loose, e_loose);
    RANK_CHECK(b_none == COUNT * sizeof(float) && e_none == 0, fail,
               "budget 1e-8 compressed something");
    RANK_CHECK(b_tight < b_none && b_loose < b_tight, fail, "bytes do not fall with the budget");
    RANK_CHECK(e_tight < e_loose, fail, "the tighter budget's error is not smaller");
    RANK_CHECK(b_loose * 5 < b_none, fail, "the loose budget sends %llu of %llu bytes",
               (unsigned long long)b_loose, (unsigned long long)b_none);
    shoal_comm_destroy(comm);
    return 0;
fail:
    return 1;
}

static void run_ranks(const char *transport, int n)
{
    if (!harness_ranks_wanted(n))
        return;
    harness_use_transport(transport, TEST_CHUNK);
    assert_int_equal(harness_run_ranks(n, rank_budgets, NULL, 600), 0);
}

static void test_shm_1(void **state) { (void)state; run_ranks("shm", 1); }
static void test_shm_2(void **state) { (void)state; run_ranks("shm", 2); }
static void test_shm_3(void **state) { (void)state; run_ranks("shm", 3); }
static void test_shm_5(void **state) { (void)state; run_ranks("shm", 5); }
static void test_shm_8(void **state) { (void)state; run_ranks("shm", 8); }
static void test_tcp_3(void **state) { (void)state; run_ranks("tcp", 3); }

static int rank_refusals(int rank, int n, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    (void)rank;
    shoal_comm_t comm;
    RANK_CHECK(shoal_comm_init(n, id, rank, &comm) == SHOAL_OK, fail, "init");
    shoal_compress_options_t o;
    shoal_compressor_t c = NULL;
    float bad_budgets[] = {0.0f, -1.0f, NAN, INFINITY};
    for (size_t i = 0; i < 4; i++) {
        shoal_compress_options_init(&o, SHOAL_COMPRESS_ADAPTIVE);
        o.budget = bad_budgets[i];
        RANK_CHECK(shoal_compressor_create(comm, &o, 8, SHOAL_FLOAT32, NULL, &c) ==
                       SHOAL_ERR_INVALID_ARG, fail, "budget %g taken", (double)o.budget);
    }
    shoal_compress_options_init(&o, SHOAL_COMPRESS_ADAPTIVE);
    o.window = 0;
    RANK_CHECK(shoal_compressor_create(comm, &o, 8, SHOAL_FLOAT32, NULL, &c) ==
                   SHOAL_ERR_INVALID_ARG, fail, "window 0 taken");
    shoal_compress_options_init(&o, SHOAL_COMPRESS_ADAPTIVE);
    o.coll = SHOAL_COMPRESS_COLL_ALLGATHER;
    RANK_CHECK(shoal_compressor_create(comm, &o, 8, SHOAL_FLOAT32, NULL, &c) ==
                   SHOAL_ERR_INVALID_ARG, fail, "an adaptive all-gather taken");
    shoal_compress_options_init(&o, SHOAL_COMPRESS_INT8);
    RANK_CHECK(shoal_compressor_create(comm, &o, 8, SHOAL_FLOAT32, NULL, &c) == SHOAL_OK, fail,
               "int8");
    shoal_compress_choice_t ch[NT];
    RANK_CHECK(shoal_compressor_choices(c, ch, 1) == SHOAL_ERR_INVALID_ARG, fail,
               "choices of int8");
    shoal_compressor_destroy(c);
    c = make(comm, 0.1f);
    RANK_CHECK(c, fail, "adaptive");
    RANK_CHECK(shoal_compressor_choices(c, ch, 2) == SHOAL_ERR_INVALID_ARG, fail,
               "choices with the wrong count");
    /* A state whose first choice is out of range: refused, nothing changed. */
    size_t bytes;
    RANK_CHECK(shoal_compressor_state_size(c, &bytes) == SHOAL_OK, fail, "size");
    unsigned char *st = malloc(bytes);
    RANK_CHECK(shoal_compressor_get_state(c, st, bytes) == SHOAL_OK, fail, "get");
    /* The state: a header of 7 words, the residual, then the adaptive
     * record: its error (a double), then each tensor's choice first. */
    size_t at = 7 * 8 + COUNT * sizeof(float) + 8;
    uint64_t wrong = 99;
    memcpy(st + at, &wrong, sizeof(wrong));
    RANK_CHECK(shoal_compressor_set_state(c, st, bytes) == SHOAL_ERR_INVALID_ARG, fail,
               "a choice out of range was taken");
    RANK_CHECK(shoal_compressor_choices(c, ch, NT) == SHOAL_OK && ch[0].kind == 0, fail,
               "a refused state changed the choices");
    free(st);
    shoal_compressor_destroy(c);
    shoal_comm_destroy(comm);
    return 0;
fail:
    return 1;
}

static void test_refusals(void **state)
{
    (void)state;
    harness_use_transport("shm", 0);
    assert_int_equal(harness_run_ranks(2, rank_refusals, NULL, 120), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_1), cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3), cmocka_unit_test(test_shm_5),
        cmocka_unit_test(test_shm_8), cmocka_unit_test(test_tcp_3),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
