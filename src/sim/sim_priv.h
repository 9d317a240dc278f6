/* The simulator's state, shared by its engine (sim.c) and its transport
 * (sim_tl.c). */
#ifndef SHOAL_SIM_PRIV_H
#define SHOAL_SIM_PRIV_H

#include "algos/team.h"
#include "fiber.h"
#include "sim.h"

#include <stdint.h>

/* One slot of a channel: when its piece arrived, when the receiver freed
 * it, and the piece's length. */
typedef struct {
    double arrive;
    double freed;
    uint32_t len;
} shoal_sim_slot_t;

/* Every rank's transport context: the simulation and the rank's team. */
typedef struct {
    shoal_tl_ctx_t base;
    struct shoal_sim *sim;
    shoal_team_t *team;
    int rank;
} shoal_sim_ctx_t;

/* A simulated rank: the team its schedules see, and why its last run
 * failed (the team's cause hook). */
typedef struct {
    shoal_team_t team; /* first: the hooks get it back from the team */
    struct shoal_sim *sim;
    int rank;
    char cause[256];
} shoal_sim_rank_t;

/* No piece on its way (next_arrive). */
#define SIM_NEVER 1e300

enum { SIM_READY, SIM_RUNNING, SIM_PARKED, SIM_DONE };

struct shoal_sim {
    shoal_sim_config_t cfg;
    int n;
    size_t depth_intra, depth_inter; /* slots of a channel inside / between hosts */
    size_t depth;                    /* slots reserved per channel: the larger */
    int *host_of;
    shoal_cluster_t cluster;         /* shared by every rank's communicator */
    shoal_sim_rank_t *ranks;         /* ranks[r] */
    shoal_sim_ctx_t *ctxs;           /* ctxs[r] */
    shoal_ep_t *eps;                 /* eps[a * n + b]: a's endpoint to b */
    shoal_ep_t **ep_ptrs;            /* the eps arrays of the communicators */

    /* Channel a -> b is index a * n + b: pieces posted and released, and
     * its slots. */
    uint32_t *posted;
    uint32_t *released;
    unsigned char *touched;          /* a asked its endpoint to b for a slot */
    shoal_sim_slot_t *slots;         /* depth per channel */

    double *clock;                   /* per rank */
    double *next_arrive;             /* per rank: earliest piece seen on its way (SIM_NEVER) */
    double *poked;                   /* per rank: earliest clock of a peer that posted to it or
                                      * freed its slot while it waited (SIM_NEVER) */
    size_t *dry_bytes;               /* per rank: passes over memory not yet charged */
    double *out_free, *in_free;      /* per host: when its link out / in is idle */

    shoal_fibers_t *fibers;
    unsigned char *state;            /* SIM_* per rank */
    unsigned char *active;           /* moved something since its last progress */
    int *heap;                       /* ready ranks, earliest clock first */
    int nheap;
    int deadlock;                    /* every rank left waits: they fail */
    void *nomem;                     /* what every slot points at: no access */
    size_t nomem_bytes;
    const shoal_codec_t *codec;      /* shoal_sim_set_codec: compressed all-reduces */
    int codec_algo;
};

extern const shoal_transport_ops_t shoal_sim_ops;
/* Kernels that touch no data: each pass adds its bytes to the size_t that
 * comm->kern_ctx points to (sim_kernels.c). */
extern const shoal_kernels_t shoal_sim_dry_kernels;

/* Make rank r ready to run if it waits. */
void shoal_sim_wake(shoal_sim_t *sim, int r);

/* Move rank r's clock past the passes over memory its schedule made since
 * the last charge (sim->dry_bytes[r], counted by the dry kernels), each at the bandwidth of the links
 * inside a host: a copy into or out of a slot costs what the real
 * transport's copy does. */
static inline void shoal_sim_charge(shoal_sim_t *sim, int r)
{
    if (sim->dry_bytes[r]) {
        sim->clock[r] += (double)sim->dry_bytes[r] /
                         sim->cfg.links.cls[sim->cfg.links.intra].bw_Bps;
        sim->dry_bytes[r] = 0;
    }
}

/* Called by the running rank r before it takes a shared link: while a ready
 * rank's clock is behind r's, let it run first, so that the links are
 * taken in the order of virtual time, not of the scheduler's turns. */
void shoal_sim_defer(shoal_sim_t *sim, int r);

#endif
