/* The software pipeline of the hierarchical collectives (hier.c,
 * hier_rsag.c): the buffer is cut into pipeline pieces, and two lanes of
 * moves run from one thread, a local lane over the links inside the host
 * and a rail lane over the links between hosts, so that piece k crosses
 * hosts while piece k+1 is worked on inside the host. Each lane is a
 * sequence of steps (a ring schedule's or a chain's moves driven one at a
 * time with polling waits); a lane whose move cannot go now
 * (SHOAL_INPROGRESS: a slot, a piece or the other lane's work is missing)
 * gives the turn to the other, and when neither moves the rank idles. Each
 * lane keeps one order of pieces on its own endpoints, the same on every
 * rank, so every FIFO carries its pieces in one order. */
#ifndef SHOAL_HIER_PIPE_H
#define SHOAL_HIER_PIPE_H

#include "algo.h"

/* The most pipeline pieces a hierarchical collective cuts its buffer into
 * (SHOAL_HIER_PIPE's range). */
#define SHOAL_HIER_PIPE_MAX 16

/* A move of the local lane when a collective is pipelined: it holds the
 * rank while pieces of the rails arrive, so it is kept short. */
#define SHOAL_HIER_LOCAL_MOVE (64u << 10)

struct shoal_hier_pipe;
struct shoal_hier_lane;

/* One move of a lane: SHOAL_OK when it moved, SHOAL_INPROGRESS when it
 * cannot now; other_done is how many pieces the other lane has finished. */
typedef shoal_status_t (*shoal_hier_move_fn)(const struct shoal_hier_pipe *pp,
                                             struct shoal_hier_lane *ln, int other_done);

/* One lane: its moves (stage, endpoints, AVG), where its current schedule
 * stands, the step of the lane's order it is at out of steps, the pieces
 * it has finished, whether the current step has done its work that comes
 * before its first move (a piece staged, copied or its residuals zeroed),
 * where a staging copy done in several moves stands (hier_rsag.c), and the
 * ring of the step. */
typedef struct shoal_hier_lane {
    shoal_prims_t p;
    shoal_ring_cur_t cur;
    int at, steps, done, begun;
    int stage_j, stage_g, stage_k;
    int push_t, push_q; /* hier.c's last piece: finished blocks pushed or taken, the peer at */
    shoal_ring_t ring;
    shoal_hier_move_fn move;
} shoal_hier_lane_t;

/* What the pieces of one run have in common: the plan, the cut, the moves
 * of the local lane, this rank's rails, and what a collective keeps for
 * its lanes (error feedback's addend; the staging of the reduce-scatter
 * and all-gather). */
typedef struct shoal_hier_pipe {
    const shoal_plan_t *plan;
    size_t count;       /* elements cut into pieces */
    size_t pipe_elems;  /* elements per piece, the last may be short */
    size_t local_elems; /* elements per move of the local lane */
    int pieces;
    int first, end, nrails; /* this rank's rails */
    int push;               /* hier.c: the last piece's gather follows its rails */
    const float *addend;
    char *stage, *spare;
} shoal_hier_pipe_t;

/* Cut count elements of plan's run into plan->pipe pieces that start on
 * multiples of align elements (0: 16); at least one piece. The rails are
 * left for the caller. */
void shoal_hier_pipe_init(shoal_hier_pipe_t *pp, const shoal_plan_t *plan, size_t count,
                          size_t align);
/* Piece k: [*qo_p, *qo_p + *ql_p). */
void shoal_hier_pipe_piece(const shoal_hier_pipe_t *pp, int k, size_t *qo_p, size_t *ql_p);
/* A local lane that works on every piece twice, before (1) and after (0)
 * its rails: its step i is piece *k_p's first or second part, in the order
 * 1:0, 1:1, 0:0, 1:2, 0:1, ..., 1:(P-1), 0:(P-2), 0:(P-1). Returns 1 for a
 * first part. Steps in all: 2 * pieces. */
int shoal_hier_local_order(int pieces, int i, int *k_p);
/* Both lanes start as the plan's prims with polling waits and the run's
 * deadline (set in plan->prims.deadline_ns); the caller sets the rest. */
void shoal_hier_lanes_init(const shoal_hier_pipe_t *pp, shoal_hier_lane_t lanes[2]);
/* Run lanes[0] (local) and lanes[1] (rail) to their ends, one move of
 * each in turn, idling when neither moves; what names the collective in
 * the deadline's message. */
shoal_status_t shoal_hier_pipe_drive(const shoal_hier_pipe_t *pp, shoal_hier_lane_t lanes[2],
                                     const char *what);

/* The cost of one pipeline piece when the buffer is cut into pieces: the
 * local lane's time, the rail lane's, and what the rail lane takes once
 * more for the whole run (a chain's fill); ctx is the collective's. */
typedef void (*shoal_hier_piece_cost_fn)(const shoal_team_t *team, const void *ctx, int pieces,
                                         double *local_p, double *cross_p, double *fill_p);
/* The run in pieces: the slowest lane's time for every piece but one,
 * plus one piece through both lanes (fill and drain). */
double shoal_hier_pipe_cost(const shoal_team_t *team, shoal_hier_piece_cost_fn fn,
                            const void *ctx, int pieces);
/* The number of pieces that costs least, of pieces that each hold at
 * least piece_min of bytes; the same on every rank, from figures every
 * rank holds alike. SHOAL_HIER_PIPE forces a number. */
int shoal_hier_pipe_choose(const shoal_team_t *team, shoal_hier_piece_cost_fn fn,
                           const void *ctx, double bytes, double piece_min);
/* Seconds of steps of the local ring moving bytes over the slowest link
 * inside the host. */
double shoal_hier_local_cost(const shoal_team_t *team, double steps, double bytes);
/* Seconds of one step of the rails' rings over a piece whose rails carry
 * wire bytes, cut into one block per host: each host's link carries its
 * rails' blocks of the step, wire / H. */
double shoal_hier_rail_step(const shoal_team_t *team, double wire);

#endif
