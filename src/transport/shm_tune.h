/* The shared-memory transport's probe at ready (shm_tune.c): what a piece
 * and a sleep cost on the machine at hand, measured between the host's two
 * first ranks through their own FIFOs, from which the first one chooses the
 * piece size, the slot depth and the spin budget of every rank of its host.
 * Private to transport/shm*.c. */
#ifndef SHOAL_SHM_TUNE_H
#define SHOAL_SHM_TUNE_H

#include "transport.h"

/* The pieces tried, smallest first: 64 KiB .. 512 KiB. */
#define SHOAL_SHM_TUNE_NPIECES 4
#define SHOAL_SHM_PIECE_MIN (64u * 1024)
#define SHOAL_SHM_PIECE_MAX (SHOAL_SHM_PIECE_MIN << (SHOAL_SHM_TUNE_NPIECES - 1))
/* Bytes of slots per FIFO while the depth follows the piece. */
#define SHOAL_SHM_RING_BYTES (1u << 20)

typedef struct {
    shoal_ep_t *ep;        /* to the other rank of the probe */
    size_t ring;           /* bytes of slots in each FIFO */
    size_t depth;          /* SHOAL_SHM_NSLOTS when set, else 0: ring / piece */
    int pieces;            /* 1: time the pieces; 0: only the sleep */
    size_t force_piece;    /* tests: the piece chosen whatever was measured, if tried */
    uint64_t deadline_ns;
    /* Lays both FIFOs of ep out as depth slots of piece bytes; called by
     * both ranks at the same point of the exchange, with both FIFOs empty. */
    void (*geometry)(shoal_ep_t *ep, size_t piece, size_t depth);
} shoal_shm_tune_cfg_t;

typedef struct {
    size_t piece;          /* 0: keep the one it opened with */
    size_t depth;
    uint64_t wake_ns;      /* median of a sleep and wake-up, with one message */
    uint64_t stream_ns[SHOAL_SHM_TUNE_NPIECES]; /* best time of the stream per piece */
} shoal_shm_tune_t;

/* The first rank's side: streams through ep at every piece, times a sleep,
 * and chooses. */
shoal_status_t shoal_shm_tune_lead(const shoal_shm_tune_cfg_t *cfg, shoal_shm_tune_t *out);
/* The second rank's side: receives what the first one streams. */
shoal_status_t shoal_shm_tune_follow(const shoal_shm_tune_cfg_t *cfg);
/* The spin budget for a sleep and wake-up of wake_ns. */
uint64_t shoal_shm_tune_spin(uint64_t wake_ns);

#endif
