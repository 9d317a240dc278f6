/* The shared-memory probe at init (transport/shm_tune.c): every rank of a
 * one-host communicator ends with the piece the host's first rank chose, a
 * piece from the tried set, FIFOs laid out with it (slot capacity and
 * depth), and collectives that are right with every piece; the settings
 * still force piece and depth; a probe that fails becomes an error on every
 * rank within the deadline. */
#include "harness.h"
#include "base/clock.h"
#include "core/comm.h"
#include "transport/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_TIMEOUT_S 120
#define KIB 1024u

typedef struct {
    size_t piece;   /* the piece every rank must end with; 0: any tried piece */
    size_t depth;   /* the slots of each FIFO; 0: 1 MiB / piece */
} expect_t;

static int tried_piece(size_t piece)
{
    return piece == 64 * KIB || piece == 128 * KIB || piece == 256 * KIB || piece == 512 * KIB;
}

/* Slots rank 0 can post to rank 1 before rank 1 frees one: the depth. The
 * empty messages are taken back by rank 1 before the collectives run. */
static int check_depth(shoal_comm_t comm, int rank, size_t piece, size_t depth)
{
    shoal_ep_t *ep = comm->team.eps[1 - rank];
    shoal_status_t s;
    uint64_t filled = 0;
    if (rank == 0) {
        void *buf;
        size_t cap;
        while (ep->ops->send_slot(ep, &buf, &cap) == SHOAL_OK) {
            RANK_CHECK(cap == piece, fail, "slot of %zu B, piece %zu B", cap, piece);
            s = ep->ops->send_post(ep, 0, NULL);
            RANK_CHECK(s == SHOAL_OK, fail, "send_post: %s", shoal_status_string(s));
            filled++;
        }
    }
    s = shoal_bootstrap_bcast(comm->bootstrap, &filled, sizeof(filled), 0);
    RANK_CHECK(s == SHOAL_OK, fail, "bcast: %s", shoal_status_string(s));
    RANK_CHECK(filled == depth, fail, "%llu slots, expected %zu", (unsigned long long)filled,
               depth);
    if (rank == 1) {
        uint64_t deadline = shoal_deadline_after(10000000000ull);
        for (uint64_t i = 0; i < filled;) {
            const void *buf;
            size_t len;
            s = ep->ops->recv_slot(ep, &buf, &len, NULL);
            if (s == SHOAL_INPROGRESS) {
                RANK_CHECK(!shoal_deadline_passed(deadline), fail, "message %llu never came",
                           (unsigned long long)i);
                continue;
            }
            RANK_CHECK(s == SHOAL_OK, fail, "recv_slot: %s", shoal_status_string(s));
            s = ep->ops->recv_release(ep);
            RANK_CHECK(s == SHOAL_OK, fail, "recv_release: %s", shoal_status_string(s));
            i++;
        }
    }
    return 0;
fail:
    return 1;
}

/* All-reduces of 0, 1, odd and several pieces' worth against the sum. */
static int check_allreduce(shoal_comm_t comm, int rank, int nranks, size_t piece)
{
    size_t counts[] = {0, 1, 1001, 5 * piece / sizeof(float) + 7};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t n = counts[c];
        float *x = malloc((n ? n : 1) * sizeof(float));
        RANK_CHECK(x, fail, "out of memory");
        for (size_t i = 0; i < n; i++)
            x[i] = (float)((i * 7 + (size_t)rank * 3) % 11);
        shoal_status_t s = shoal_allreduce(x, x, n, SHOAL_FLOAT32, SHOAL_SUM, comm);
        int bad = s != SHOAL_OK;
        for (size_t i = 0; i < n && !bad; i++) {
            float want = 0;
            for (int r = 0; r < nranks; r++)
                want += (float)((i * 7 + (size_t)r * 3) % 11);
            bad = x[i] != want;
        }
        free(x);
        RANK_CHECK(!bad, fail, "all-reduce of %zu floats: %s", n, shoal_status_string(s));
    }
    return 0;
fail:
    return 1;
}

static int rank_tuned(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    const expect_t *want = arg;
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    RANK_CHECK(s == SHOAL_OK, fail, "init: %s", shoal_status_string(s));
    size_t piece = comm->team.chunk_size;
    RANK_CHECK(want->piece ? piece == want->piece : tried_piece(piece), fail,
               "piece of %zu B", piece);
    /* The same on every rank. */
    size_t *all = calloc((size_t)nranks, sizeof(*all));
    RANK_CHECK(all, fail, "out of memory");
    all[rank] = piece;
    s = shoal_bootstrap_allgather(comm->bootstrap, all, sizeof(*all));
    RANK_CHECK(s == SHOAL_OK, fail, "allgather: %s", shoal_status_string(s));
    for (int r = 0; r < nranks; r++)
        RANK_CHECK(all[r] == piece, fail, "rank %d has %zu B pieces, rank %d %zu B", r, all[r],
                   rank, piece);
    free(all);
    if (nranks > 1 && rank < 2 &&
        check_depth(comm, rank, piece, want->depth ? want->depth : (1024 * KIB) / piece))
        return 1;
    if (nranks > 1 && rank >= 2) {
        uint64_t filled;
        s = shoal_bootstrap_bcast(comm->bootstrap, &filled, sizeof(filled), 0);
        RANK_CHECK(s == SHOAL_OK, fail, "bcast: %s", shoal_status_string(s));
    }
    if (check_allreduce(comm, rank, nranks, piece))
        return 1;
    s = shoal_comm_destroy(comm);
    RANK_CHECK(s == SHOAL_OK, fail, "destroy: %s", shoal_status_string(s));
    return 0;
fail:
    return 1;
}

static int setup(void **state)
{
    (void)state;
    harness_setenv("SHOAL_CHUNK_SIZE", NULL);
    harness_setenv("SHOAL_SHM_NSLOTS", NULL);
    harness_setenv("SHOAL_SHM_SPIN", NULL);
    harness_setenv("SHOAL_SHM_ENABLE", NULL);
    harness_setenv("SHOAL_HOST_ID", NULL);
    harness_setenv("SHOAL_TEST_SHM_PIECE", NULL);
    harness_setenv("SHOAL_TEST_SHM_PROBE_FAIL", NULL);
    harness_setenv("SHOAL_TIMEOUT", NULL);
    return 0;
}

/* What the probe measured, at every rank count. */
static void test_measured(void **state)
{
    (void)state;
    expect_t want = {0, 0};
    for (int n = 1; n <= 8; n++) {
        if (!harness_ranks_wanted(n))
            continue;
        int rc = harness_run_ranks(n, rank_tuned, &want, TEST_TIMEOUT_S);
        if (rc != 0)
            fprintf(stderr, "# failed with %d ranks\n", n);
        assert_int_equal(rc, 0);
    }
}

/* Every piece the probe may choose lays the FIFOs out right. */
static void test_every_piece(void **state)
{
    (void)state;
    static const char *pieces[] = {"64k", "128k", "256k", "512k"};
    for (int k = 0; k < 4; k++) {
        harness_setenv("SHOAL_TEST_SHM_PIECE", pieces[k]);
        expect_t want = {(64 * KIB) << k, 0};
        assert_int_equal(harness_run_ranks(3, rank_tuned, &want, TEST_TIMEOUT_S), 0);
        assert_int_equal(harness_run_ranks(4, rank_tuned, &want, TEST_TIMEOUT_S), 0);
    }
}

/* SHOAL_SHM_NSLOTS fixes the depth whatever the piece; SHOAL_CHUNK_SIZE
 * the piece, with no probe of pieces. */
static void test_settings_force(void **state)
{
    (void)state;
    harness_setenv("SHOAL_SHM_NSLOTS", "3");
    harness_setenv("SHOAL_TEST_SHM_PIECE", "256k");
    expect_t want = {256 * KIB, 3};
    assert_int_equal(harness_run_ranks(3, rank_tuned, &want, TEST_TIMEOUT_S), 0);
    harness_setenv("SHOAL_TEST_SHM_PIECE", NULL);
    harness_setenv("SHOAL_SHM_NSLOTS", NULL);
    harness_setenv("SHOAL_CHUNK_SIZE", "32k");
    harness_setenv("SHOAL_SHM_SPIN", "50us");
    want = (expect_t){32 * KIB, 8};
    assert_int_equal(harness_run_ranks(3, rank_tuned, &want, TEST_TIMEOUT_S), 0);
}

typedef struct {
    int victim;
} fail_arg_t;

/* Every rank's init fails, within the deadline and with a message. */
static int rank_probe_fails(int rank, int nranks, const shoal_unique_id_t *id, void *arg)
{
    (void)arg;
    shoal_comm_t comm;
    uint64_t t0 = shoal_now_ns();
    shoal_status_t s = shoal_comm_init(nranks, id, rank, &comm);
    double took = (double)(shoal_now_ns() - t0) * 1e-9;
    RANK_CHECK(s != SHOAL_OK, fail, "init succeeded");
    RANK_CHECK(took < 20.0, fail, "init failed only after %.1f s", took);
    RANK_CHECK(strstr(shoal_comm_last_error(NULL), "probe") != NULL, fail, "error: %s",
               shoal_comm_last_error(NULL));
    return 0;
fail:
    return 1;
}

static void test_probe_fails(void **state)
{
    (void)state;
    harness_setenv("SHOAL_TIMEOUT", "3s");
    for (int victim = 0; victim < 2; victim++) {
        char text[8];
        snprintf(text, sizeof(text), "%d", victim);
        harness_setenv("SHOAL_TEST_SHM_PROBE_FAIL", text);
        assert_int_equal(harness_run_ranks(4, rank_probe_fails, NULL, TEST_TIMEOUT_S), 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_measured, setup),
        cmocka_unit_test_setup(test_every_piece, setup),
        cmocka_unit_test_setup(test_settings_force, setup),
        cmocka_unit_test_setup(test_probe_fails, setup),
    };
    return cmocka_run_group_tests_name("tune", tests, NULL, NULL);
}
