/* The probe at ready (shm_tune.h). What a pipeline piece costs beyond its
 * copy (the flag traffic between two cores, the waits, the yields) and
 * what a sleep costs differ from machine to machine and even from run to
 * run of one machine (as the host places its virtual CPUs near or far), so
 * no fixed default suits them all. The host's first two ranks measure both
 * through the FIFOs they will use:
 * - a sleep: the second rank sleeps on its doorbell, the first posts a
 *   message and times how long the answer takes (the median of a few);
 * - a stream of STREAM_BYTES, copied into slots by the first rank and out
 *   of them by the second, as every slot schedule does, at each candidate
 *   piece with the depth that fills the FIFO; twice, in opposite orders,
 *   keeping the faster of each.
 * The first rank takes the smallest piece within TIE of the fastest (a
 * smaller piece starts the pipeline sooner) and a spin budget equal to the
 * sleep's cost (polling longer than a sleep and wake-up costs can at most
 * double a wait). Both ranks' FIFOs are empty at every change of layout:
 * each stream ends with the second rank's answer, which the first takes
 * before the next one starts. */
#include "shm_tune.h"

#include "base/clock.h"
#include "base/log.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STREAM_BYTES (4u << 20)
#define WARM_BYTES (1u << 20)
#define WAKES 9
/* How long the first rank leaves the second to fall asleep. */
#define WAKE_GAP_NS 200000l
#define TIE 1.10
#define SPIN_MIN_NS 10000u
#define SPIN_MAX_NS 1000000u
#define POLLS 64

enum { MSG_DATA = 1, MSG_DONE, MSG_READY, MSG_PING };

static size_t tune_piece(int i)
{
    return (size_t)SHOAL_SHM_PIECE_MIN << i;
}

static size_t tune_depth(const shoal_shm_tune_cfg_t *cfg, size_t piece)
{
    return cfg->depth ? cfg->depth : cfg->ring / piece;
}

/* Between polls: yield now and then (the other rank may share this core)
 * or sleep on the doorbell; and give up at the deadline. */
static shoal_status_t tune_idle(const shoal_shm_tune_cfg_t *cfg, unsigned *polls, int sleep)
{
    if (++*polls % POLLS)
        return SHOAL_OK;
    if (shoal_deadline_passed(cfg->deadline_ns)) {
        shoal_error(SHM, "rank %d: the shared-memory probe with rank %d did not finish before "
                    "the deadline", cfg->ep->ctx->params.rank, cfg->ep->peer);
        return SHOAL_ERR_TIMEOUT;
    }
    shoal_tl_ctx_t *ctx = cfg->ep->ctx;
    if (sleep) {
        shoal_status_t s = ctx->ops->sleep(ctx, UINT64_MAX, 10000000u);
        if (s != SHOAL_OK && s != SHOAL_INPROGRESS)
            return s;
    } else {
        sched_yield();
    }
    return SHOAL_OK;
}

static shoal_status_t tune_send(const shoal_shm_tune_cfg_t *cfg, int type, const void *src,
                                size_t len)
{
    shoal_ep_t *ep = cfg->ep;
    unsigned char hdr[SHOAL_TL_HDR_BYTES] = {(unsigned char)type};
    unsigned polls = 0;
    for (;;) {
        void *slot;
        size_t cap;
        shoal_status_t s = ep->ops->send_slot(ep, &slot, &cap);
        if (s == SHOAL_OK) {
            if (len > cap)
                return SHOAL_ERR_INTERNAL;
            if (len)
                memcpy(slot, src, len);
            return ep->ops->send_post(ep, len, hdr);
        }
        if (s != SHOAL_INPROGRESS || (s = tune_idle(cfg, &polls, 0)) != SHOAL_OK)
            return s;
    }
}

/* Take the next message, which must be of type, into dst (NULL: drop it);
 * its length in *len_p. */
static shoal_status_t tune_recv(const shoal_shm_tune_cfg_t *cfg, int type, void *dst,
                                size_t *len_p, int sleep)
{
    shoal_ep_t *ep = cfg->ep;
    unsigned char hdr[SHOAL_TL_HDR_BYTES];
    unsigned polls = 0;
    for (;;) {
        const void *slot;
        size_t len;
        shoal_status_t s = ep->ops->recv_slot(ep, &slot, &len, hdr);
        if (s == SHOAL_OK) {
            if (hdr[0] != type) {
                shoal_error(SHM, "rank %d: the shared-memory probe got message %u from rank %d, "
                            "expected %d", ep->ctx->params.rank, hdr[0], ep->peer, type);
                return SHOAL_ERR_INTERNAL;
            }
            if (dst && len)
                memcpy(dst, slot, len);
            if (len_p)
                *len_p = len;
            return ep->ops->recv_release(ep);
        }
        if (s != SHOAL_INPROGRESS || (s = tune_idle(cfg, &polls, sleep)) != SHOAL_OK)
            return s;
    }
}

static shoal_status_t lead_wakes(const shoal_shm_tune_cfg_t *cfg, uint64_t *wake_p)
{
    uint64_t t[WAKES];
    shoal_status_t s = tune_recv(cfg, MSG_READY, NULL, NULL, 0);
    for (int i = 0; i < WAKES && s == SHOAL_OK; i++) {
        struct timespec gap = {0, WAKE_GAP_NS};
        nanosleep(&gap, NULL);
        uint64_t t0 = shoal_now_ns();
        s = tune_send(cfg, MSG_PING, NULL, 0);
        if (s == SHOAL_OK)
            s = tune_recv(cfg, MSG_READY, NULL, NULL, 0);
        t[i] = shoal_now_ns() - t0;
    }
    if (s != SHOAL_OK)
        return s;
    *wake_p = shoal_median_ns(t, WAKES);
    return SHOAL_OK;
}

static shoal_status_t follow_wakes(const shoal_shm_tune_cfg_t *cfg)
{
    shoal_status_t s = tune_send(cfg, MSG_READY, NULL, 0);
    for (int i = 0; i < WAKES && s == SHOAL_OK; i++) {
        s = tune_recv(cfg, MSG_PING, NULL, NULL, 1);
        if (s == SHOAL_OK)
            s = tune_send(cfg, MSG_READY, NULL, 0);
    }
    return s;
}

/* One stream of bytes at piece; the time until the second rank has it all. */
static shoal_status_t lead_stream(const shoal_shm_tune_cfg_t *cfg, const unsigned char *src,
                                  size_t bytes, size_t piece, uint64_t *ns_p)
{
    cfg->geometry(cfg->ep, piece, tune_depth(cfg, piece));
    uint64_t t0 = shoal_now_ns();
    shoal_status_t s = SHOAL_OK;
    for (size_t off = 0; off < bytes && s == SHOAL_OK; off += piece)
        s = tune_send(cfg, MSG_DATA, src + off, piece);
    if (s == SHOAL_OK)
        s = tune_recv(cfg, MSG_DONE, NULL, NULL, 0);
    *ns_p = shoal_now_ns() - t0;
    return s;
}

static shoal_status_t follow_stream(const shoal_shm_tune_cfg_t *cfg, unsigned char *dst,
                                    size_t bytes, size_t piece)
{
    cfg->geometry(cfg->ep, piece, tune_depth(cfg, piece));
    shoal_status_t s = SHOAL_OK;
    for (size_t off = 0; off < bytes && s == SHOAL_OK; off += piece)
        s = tune_recv(cfg, MSG_DATA, dst + off, NULL, 0);
    return s == SHOAL_OK ? tune_send(cfg, MSG_DONE, NULL, 0) : s;
}

/* The order of the pieces in each round: up, then down. */
static int round_piece(int round, int i)
{
    return round % 2 ? SHOAL_SHM_TUNE_NPIECES - 1 - i : i;
}

static int tune_valid(size_t piece)
{
    for (int k = 0; k < SHOAL_SHM_TUNE_NPIECES; k++) {
        if (piece == tune_piece(k))
            return 1;
    }
    return 0;
}

uint64_t shoal_shm_tune_spin(uint64_t wake_ns)
{
    return wake_ns < SPIN_MIN_NS ? SPIN_MIN_NS : wake_ns > SPIN_MAX_NS ? SPIN_MAX_NS : wake_ns;
}

shoal_status_t shoal_shm_tune_lead(const shoal_shm_tune_cfg_t *cfg, shoal_shm_tune_t *out)
{
    shoal_shm_tune_t r = {0};
    shoal_status_t s = lead_wakes(cfg, &r.wake_ns);
    if (s != SHOAL_OK || !cfg->pieces) {
        *out = r;
        return s;
    }
    unsigned char *src = malloc(STREAM_BYTES);
    if (!src) {
        shoal_error(SHM, "shared-memory probe: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    memset(src, 0x5a, STREAM_BYTES);
    uint64_t ns;
    s = lead_stream(cfg, src, WARM_BYTES, tune_piece(0), &ns);
    for (int round = 0; round < 2 && s == SHOAL_OK; round++) {
        for (int i = 0; i < SHOAL_SHM_TUNE_NPIECES && s == SHOAL_OK; i++) {
            int k = round_piece(round, i);
            s = lead_stream(cfg, src, STREAM_BYTES, tune_piece(k), &ns);
            if (round == 0 || ns < r.stream_ns[k])
                r.stream_ns[k] = ns;
        }
    }
    free(src);
    if (s != SHOAL_OK)
        return s;
    uint64_t best = UINT64_MAX;
    for (int k = 0; k < SHOAL_SHM_TUNE_NPIECES; k++)
        best = r.stream_ns[k] < best ? r.stream_ns[k] : best;
    for (int k = SHOAL_SHM_TUNE_NPIECES - 1; k >= 0; k--) {
        if ((double)r.stream_ns[k] <= TIE * (double)best)
            r.piece = tune_piece(k);
    }
    if (tune_valid(cfg->force_piece))
        r.piece = cfg->force_piece;
    r.depth = tune_depth(cfg, r.piece);
    *out = r;
    return SHOAL_OK;
}

shoal_status_t shoal_shm_tune_follow(const shoal_shm_tune_cfg_t *cfg)
{
    shoal_status_t s = follow_wakes(cfg);
    if (s != SHOAL_OK || !cfg->pieces)
        return s;
    unsigned char *dst = malloc(STREAM_BYTES);
    if (!dst) {
        shoal_error(SHM, "shared-memory probe: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    memset(dst, 0, STREAM_BYTES);
    s = follow_stream(cfg, dst, WARM_BYTES, tune_piece(0));
    for (int round = 0; round < 2 && s == SHOAL_OK; round++) {
        for (int i = 0; i < SHOAL_SHM_TUNE_NPIECES && s == SHOAL_OK; i++)
            s = follow_stream(cfg, dst, STREAM_BYTES, tune_piece(round_piece(round, i)));
    }
    free(dst);
    return s;
}
