/* Algorithms: each is one static const ops table. plan() does the work
 * that depends only on the call's shape (neighbours, piece sizes, kernels);
 * run() moves the data and may be repeated with the same plan. */
#ifndef SHOAL_ALGO_H
#define SHOAL_ALGO_H

#include "team.h"
#include "prims.h"

/* What a call asks for. The values index the per-collective algorithm lists
 * of select.c and the names of shoal_coll_kind_name. */
typedef enum {
    SHOAL_COLL_ALLREDUCE = 0,
    SHOAL_COLL_REDUCE_SCATTER,
    SHOAL_COLL_ALLGATHER,
    SHOAL_COLL_BROADCAST,
    SHOAL_COLL_REDUCE,
    SHOAL_COLL_ALLTOALL,  /* count elements to and from every rank */
    SHOAL_COLL_ALLTOALLV, /* counts and displacements per rank */
    SHOAL_COLL_GATHER,
    SHOAL_COLL_SCATTER,
    SHOAL_COLL_SEND,
    SHOAL_COLL_RECV,
    SHOAL_COLL_KIND_COUNT
} shoal_coll_kind_t;

/* "allreduce", "reducescatter", "allgather", "broadcast", "reduce",
 * "alltoall", "alltoallv", "gather", "scatter", "send", "recv". */
const char *shoal_coll_kind_name(shoal_coll_kind_t kind);

/*
 * One call's arguments, as the algorithms see them (already checked):
 * - allreduce, broadcast, reduce: count elements per buffer.
 * - reduce-scatter: count = recvcount; sendbuf holds nranks * count.
 * - all-gather: count = sendcount; recvbuf holds nranks * count.
 * - all-to-all: count elements to and from every rank; block j of sendbuf
 *   goes to rank j, block j of recvbuf comes from rank j. sendbuf never
 *   overlaps recvbuf (the core stages an in-place call's input).
 * - all-to-all-v: sendcounts[j] elements from sendbuf + sdispls[j]
 *   elements go to rank j; recvcounts[j] from rank j land at recvbuf +
 *   rdispls[j]. The arrays have nranks entries; count is unused.
 * - gather: count = sendcount; root's recvbuf holds nranks * count.
 * - scatter: count = recvcount; root's sendbuf holds nranks * count.
 * - send: count elements of sendbuf to rank root; recv: count elements
 *   from rank root into recvbuf.
 * op is a built-in op (pre-multiplied sums are applied by the core before
 * the algorithm runs, as a plain SUM).
 * stage_bytes > 0: the input is staged in the plan's own memory (its
 * input, that many bytes), which the core fills before the run; a NULL
 * sendbuf or recvbuf then stands for that memory.
 */
typedef struct {
    shoal_coll_kind_t kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    shoal_dtype_t dtype;
    shoal_op_t op;
    int root;             /* rooted collectives; the peer of send/recv; 0 elsewhere */
    const size_t *sendcounts, *sdispls, *recvcounts, *rdispls; /* all-to-all-v only */
    /* A compressed all-reduce or reduce-scatter (fp32, SUM or AVG): the
     * codec, and the error-feedback residual of the input's floats (count,
     * or nranks * count for the reduce-scatter) or NULL. residual_in: the
     * last call's residual, as many floats or NULL, added
     * to this rank's input piece by piece as it is encoded (it may be
     * residual itself). NULL codec for every other call. */
    const shoal_codec_t *codec;
    float *residual;
    const float *residual_in;
    int codec_algo; /* shoal_compress_algo_t; with codec */
    size_t stage_bytes;   /* of staged input; 0: the caller's buffers */
} shoal_coll_args_t;

/*
 * A ring over some ranks of team (a team) and where each position's block
 * lies in the buffer a ring schedule works on. Position p is team rank
 * ranks[p]; the caller is at position me. Layouts of block p:
 * - BY_RANK: [ranks[p] * unit, + unit): one block per rank, by rank (the
 *   flat reduce-scatter and all-gather).
 * - BY_SEG: the segments (of total elements cut into cluster->max_local
 *   aligned segments) that local position p of host `host` owns, one run
 *   (shoal_cluster_owned_rails).
 * - BY_RAIL: blocks of unit elements staged as host `host` stages rails
 *   (shoal_cluster_stage_off): the rails p, p + n, ... that local position
 *   p owns by the modulo rule.
 * - BY_HOST: a rail ring of rail `rail` (position p is host p): a block of
 *   unit elements for each host that holds a rank at local position rail,
 *   packed in host order; none for the others.
 */
enum { SHOAL_RING_BY_RANK, SHOAL_RING_BY_SEG, SHOAL_RING_BY_RAIL, SHOAL_RING_BY_HOST };

typedef struct shoal_ring {
    int n;
    int me;
    const int *ranks;
    int layout;
    size_t unit;
    size_t total;
    size_t align; /* BY_SEG: segments start on multiples of align elements (0: 16) */
    int host;
    int rail;
    const shoal_cluster_t *cluster;
} shoal_ring_t;

/* Block of position p, in elements. */
void shoal_ring_block(const shoal_ring_t *ring, int p, size_t *off_p, size_t *len_p);
/* The rank whose block position p holds: BY_RANK's rank, BY_HOST's rank
 * at the rail's position of host p; -1 where there is none (a host
 * without the rail) or the block is not one rank's (BY_SEG, BY_RAIL). */
int shoal_ring_block_rank(const shoal_ring_t *ring, int p);
/* The longest block of ring: how far the piece loops of its stepped
 * schedules go. */
size_t shoal_ring_max_len(const shoal_ring_t *ring);
/* The piece at offset off (elements) of position q's block: its start
 * (elements into the buffer) in *start_p and its length, 0 past the
 * block's end. */
size_t shoal_ring_piece(const shoal_ring_t *ring, int q, size_t off, size_t piece_elems,
                        size_t *start_p);
/* Start of segment s of total elements cut into nseg segments that start
 * on multiples of align elements (0: the kernels' alignment, 16; a codec's
 * block for compressed schedules); s == nseg gives total. */
size_t shoal_ring_seg_off(size_t total, int nseg, int s, size_t align);
/* Point p's endpoints at ring's neighbours. */
void shoal_ring_bind(shoal_prims_t *p, const shoal_ring_t *ring);
/* The ranks of this rank's host in local order, with layout (the caller
 * sets unit or total). */
void shoal_ring_local(shoal_team_t *team, int layout, shoal_ring_t *ring_p);
/* Rail j across hosts, this rank at its host's position: rails is the
 * cluster's rail_ranks or rail_mod_ranks. Layout BY_HOST (the caller sets
 * unit where the schedule uses blocks). */
void shoal_ring_rail(shoal_team_t *team, const int *rails, int j, shoal_ring_t *ring_p);
/* Every rank of team in the cluster's ring order, blocks BY_RANK of unit. */
void shoal_ring_flat(shoal_team_t *team, size_t unit, shoal_ring_t *ring_p);

/* The ring schedules, over the team with p's stage and kernels (p->team,
 * st, reduce, dtype, esize, avg_n and deadline set; the endpoints are
 * bound here):
 * - allreduce: count elements of src reduced into dst on every member
 *   (blocks of the loop, whatever the layout). src[0] and dst[0] are
 *   element `first` of the whole tensor, which a codec stage's indices and
 *   residual are offset by (0 for a whole tensor; a multiple of the
 *   stage's block); pieces hold piece_elems elements (for a codec stage a
 *   multiple of its block whose wire fits a slot: the stage's piece_elems);
 * - rs: block p of src reduced over the team; the caller's block lands at
 *   dst (which may be its block in src);
 * - ag: every block of dst from its position's owner; the caller's own
 *   block is read from own and copied into place piece by piece as it
 *   goes out (one pass over the input instead of two), or is in place
 *   already when own is NULL.
 * A team of one runs the stage's alone (a copy, AVG finished when
 * p->avg_n > 1; a codec stage zeroes its residual). */
shoal_status_t shoal_ring_allreduce_run(shoal_prims_t *p, const shoal_ring_t *ring,
                                        const char *src, char *dst, size_t count, size_t first,
                                        size_t piece_elems);
shoal_status_t shoal_ring_rs_run(shoal_prims_t *p, const shoal_ring_t *ring, const char *src,
                                 char *dst, size_t piece_elems);
/* The most loops shoal_ring_allreduce_run_deep keeps in flight. */
#define SHOAL_RING_DEPTH_MAX 4
/* The all-reduce with up to depth loops in flight at once (at most
 * SHOAL_RING_DEPTH_MAX, and fewer than the slots of any FIFO it uses):
 * loop d runs one move behind loop d-1, so that on a link of high latency
 * a step waits for its pieces' latency once for depth loops instead of
 * once per loop. The same result as shoal_ring_allreduce_run, which it is
 * for depth 1. */
shoal_status_t shoal_ring_allreduce_run_deep(shoal_prims_t *p, const shoal_ring_t *ring,
                                             const char *src, char *dst, size_t count,
                                             size_t first, size_t piece_elems, int depth);
shoal_status_t shoal_ring_ag_run(shoal_prims_t *p, const shoal_ring_t *ring, const char *own,
                                 char *dst, size_t piece_elems);
/* The same schedules one move at a time, for a pipeline that drives
 * several of them from one thread (hier.c): each call makes the next move
 * of the schedule that cur (zeroed at the start) stands at, then, after
 * the last, flushes; cur->done is set once the schedule has ended. With
 * p->poll a move that would wait returns SHOAL_INPROGRESS having changed
 * nothing, to be called again later; the endpoints are bound on every
 * call, so runs of different rings may share p between calls. The
 * arguments must be the same on every call of one run. */
typedef struct {
    size_t at;  /* the loop the schedule is in: its base, in elements */
    size_t end; /* rs and ag: 1 + the longest block (0: not yet known) */
    int k;      /* the move within the loop */
    int done;
} shoal_ring_cur_t;
shoal_status_t shoal_ring_allreduce_step(shoal_prims_t *p, const shoal_ring_t *ring,
                                         const char *src, char *dst, size_t count,
                                         size_t first, size_t piece_elems,
                                         shoal_ring_cur_t *cur);
shoal_status_t shoal_ring_rs_step(shoal_prims_t *p, const shoal_ring_t *ring, const char *src,
                                  char *dst, size_t piece_elems, shoal_ring_cur_t *cur);
shoal_status_t shoal_ring_ag_step(shoal_prims_t *p, const shoal_ring_t *ring, const char *own,
                                  char *dst, size_t piece_elems, shoal_ring_cur_t *cur);
/* The two-shot reduce-scatter over ring's positions (twoshot.c), stepped
 * as above: each piece of position q's block goes straight from every
 * other position to q, which adds the n-1 of them to its own in a fixed
 * order (the stage's recv_reduce: a codec's contribution is quantised
 * once); the caller's block lands at dst. A stage indexes the values of
 * position q's block (first, residual, addend) from
 * rank * stride + first, rank being shoal_ring_block_rank's, so that a
 * rail's blocks keep the indices they have in the caller's input. The
 * caller's own block is never quantised: its residual is 0 at the end of
 * each piece, and AVG over p->avg_n is finished there. */
shoal_status_t shoal_twoshot_rs_step(shoal_prims_t *p, const shoal_ring_t *ring,
                                     const char *src, char *dst, size_t stride, size_t first,
                                     size_t piece_elems, shoal_ring_cur_t *cur);
/* The all-gather half of one loop of the ring all-reduce (its blocks as
 * shoal_ring_loop_block cuts real elements at base into blocks of bs):
 * position q has just sent the final piece of loop block (q + shift) mod n
 * to its successor; each goes round unchanged (recv_copy_send) and the
 * last hop sends nothing on (recv). Endpoints bound to ring. The two-shot
 * all-reduce shares it. */
shoal_status_t shoal_ring_gather_run(shoal_prims_t *p, const shoal_ring_t *ring, char *dst,
                                     size_t first, size_t base, size_t real, size_t bs,
                                     int shift);
/* Hops [from, to) of it (1 <= from, to <= n), the endpoints as they are. */
shoal_status_t shoal_ring_gather_hops(shoal_prims_t *p, const shoal_ring_t *ring, char *dst,
                                      size_t first, size_t base, size_t real, size_t bs,
                                      int shift, int from, int to);

/* The all-reduce's ring (shoal_ring_allreduce_step) over count elements in
 * one loop (count <= n * piece_elems): the element range of the block
 * that position me holds finished after move k (n-1 <= k <= 2n-2), the
 * (k - n + 1)th it finishes: block (me + 1 - (k - n + 1)) mod n. */
void shoal_ring_allreduce_finished(const shoal_prims_t *p, int n, int me, size_t count,
                                   size_t piece_elems, int k, size_t *off_p, size_t *len_p);
/* Element range [*off_p, *off_p + *len_p) of block b in a ring loop of
 * real elements cut into blocks of bs (the last ones may be short or empty). */
void shoal_ring_loop_block(size_t real, size_t bs, int b, size_t *off_p, size_t *len_p);
/* Block size of a ring loop of real elements over n positions: a share
 * rounded up to align elements, at most piece_elems. */
size_t shoal_ring_loop_bs(size_t real, int n, size_t align, size_t piece_elems);
/* The most values, a multiple of codec->block, whose wire fits slot bytes;
 * 0 when not even one block does (stage_codec.c). */
size_t shoal_ring_codec_piece(const shoal_codec_t *codec, size_t slot);

#define SHOAL_PLAN_NBRS 16

/*
 * A plan: what an algorithm works out once for a call's shape (the
 * collective, count, type, op, root, codec shape, staged input and
 * settings), then runs for every call of that shape. shoal_plan_get keeps
 * one per collective kind on the communicator, so repeated calls re-plan
 * nothing. Its memory is taken when it is made and released when it is
 * destroyed: the staged input (args.stage_bytes) and the working memory
 * its algorithm reserved (shoal_plan_reserve), in one block registered
 * with every open transport's memory domain.
 */
struct shoal_algo_ops;
typedef struct shoal_plan {
    const struct shoal_algo_ops *algo; /* the algorithm it was made for */
    unsigned settings;        /* shoal_config_generation() then */
    void *input;              /* staged input, args.stage_bytes; owned */
    void *scratch;            /* working memory of its runs, scratch_bytes */
    size_t scratch_bytes;
    /* The block input and scratch share, and its registration with each
     * open transport (NULL where one declined), for transports that move
     * only registered memory. */
    void *mem;
    size_t mem_bytes;
    shoal_mem_t *reg[SHOAL_MAX_TRANSPORTS];
    /* An algorithm that may run another in its place (the put collectives
     * when some rank's buffer is not shareable): that one's plan, owned,
     * and how many calls to run it before trying again, and the length of
     * the last such wait; the same on every rank. */
    struct shoal_plan *fallback;
    unsigned skip, skip_len;
    shoal_coll_args_t args;   /* the call it runs (buffers rebound per run) */
    /* A copy of the codec the plan was made for: the key of its shape. The
     * call's codec (args.codec) is borrowed for one run only (the
     * compressor's lives on its stack), so the cache must not read it
     * again at the next call. */
    shoal_codec_t codec_shape;
    shoal_prims_t prims;
    size_t esize;
    size_t piece_elems;   /* elements per pipeline piece (chunk_size / esize) */
    size_t stage_elems;   /* elements per piece of the plan's stage (a codec
                           * stage's wire must fit a slot); piece_elems for
                           * the plain stage */
    int pipe;                 /* the hierarchical collectives: their pipeline pieces
                               * (hier_pipe.h) */
    int nbr[SHOAL_PLAN_NBRS]; /* neighbours as the algorithm lays them out */
    int nnbr;
    shoal_ring_t ring;        /* the ring algorithms' team */
} shoal_plan_t;

/*
 * The double binary tree's schedule (tree.c), shared by the plain tree
 * all-reduce and the compressed one (tree_codec.c): the heap layout of
 * both trees, the two halves of the data, the global numbering of their
 * pieces and the window order that keeps every FIFO's messages in one
 * global order. A schedule supplies only how this rank moves one piece up
 * and down a tree.
 */
/* Pieces per window, both trees together. */
#define SHOAL_TREE_WINDOW 8
/* plan->nbr[3t + which] for tree t (0: A, 1: B). */
enum { SHOAL_TREE_PARENT = 0, SHOAL_TREE_LEFT = 1, SHOAL_TREE_RIGHT = 2 };

/* Half A is the first count_a elements (never fewer than half B's
 * count_b), each half cut into pieces of pe elements. */
typedef struct {
    size_t pieces_a, pieces_b, count_a, count_b, pe;
} shoal_tree_layout_t;

/* This rank's part of piece q of the global order, elements [off, off +
 * len) of the tensor, going up (or coming down) tree t; ctx is the
 * schedule's. */
typedef shoal_status_t (*shoal_tree_part_fn)(shoal_plan_t *plan, void *ctx, int t, size_t q,
                                             size_t off, size_t len);

/* The halves of count elements, half A rounded up to a multiple of align,
 * in pieces of pe elements. */
void shoal_tree_layout(size_t count, size_t align, size_t pe, shoal_tree_layout_t *l_p);
/* Estimated seconds of the tree schedule over layout l moving bytes in
 * all, in pieces of at most piece_bytes. */
double shoal_tree_cost_of(const shoal_team_t *team, const shoal_tree_layout_t *l,
                          double bytes, double piece_bytes);
/* The plan of the tree all-reduce: shoal_plan_init and this rank's
 * parent and children in both trees (nbr, nnbr). */
shoal_status_t shoal_tree_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                               shoal_plan_t *plan);
/* The endpoint of this rank's neighbour which in tree t; NULL for none. */
shoal_ep_t *shoal_tree_ep(const shoal_plan_t *plan, int t, int which);
/* Every piece of l up and down the trees in the window order (up and down
 * called for each of this rank's parts), then every send flushed.
 * p->deadline_ns set by the caller. */
shoal_status_t shoal_tree_schedule(shoal_plan_t *plan, const shoal_tree_layout_t *l,
                                   shoal_tree_part_fn up, shoal_tree_part_fn down, void *ctx);

/* Cost and plan of the flat codec schedules (the ring and the two-shot):
 * 2(n-1) steps of 1/n of the wire each; the ring's plan with the codec
 * stage (shoal_plan_stage). */
double shoal_codec_flat_cost(const shoal_team_t *team, const shoal_coll_args_t *args);
/* A compressed reduce-scatter's or all-gather's: n-1 steps of one block's
 * wire (count values) over the slowest link (ring_rsag.c). */
double shoal_codec_block_cost(const shoal_team_t *team, const shoal_coll_args_t *args);
shoal_status_t shoal_codec_flat_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                     shoal_plan_t *plan);

typedef struct shoal_algo_ops {
    size_t size; /* sizeof(shoal_algo_ops_t) */
    const char *name;
    /* Estimated seconds for args on team, for selection; < 0: cannot run. */
    double (*cost)(const shoal_team_t *team, const shoal_coll_args_t *args);
    shoal_status_t (*plan)(shoal_team_t *team, const shoal_coll_args_t *args,
                           shoal_plan_t *plan_p);
    shoal_status_t (*run)(shoal_plan_t *plan);
} shoal_algo_ops_t;

/* Cost model inputs: the slowest link of team (largest latency, smallest
 * bandwidth over every peer's transport, or the SHOAL_ALGO_LAT/_BW
 * settings), and whether every rank shares this rank's host. */
static inline double shoal_algo_lat(const shoal_team_t *team)
{
    return team->cost.link_lat_s;
}
static inline double shoal_algo_bw(const shoal_team_t *team)
{
    return team->cost.link_bw_Bps;
}
/* The links inside a host and between hosts, for the hierarchical
 * algorithms (topo/links.h). Flows that leave a host at once share its
 * link between hosts. */
static inline const shoal_link_cost_t *shoal_algo_intra(const shoal_team_t *team)
{
    return &team->cost.links.cls[team->cost.links.intra];
}
static inline const shoal_link_cost_t *shoal_algo_inter(const shoal_team_t *team)
{
    return &team->cost.links.cls[team->cost.links.inter];
}
/* How many ranks of a host send across hosts at once when every rank
 * does: the share of the host's link each gets is 1 / this. */
static inline double shoal_algo_host_share(const shoal_team_t *team)
{
    return team->nhosts > 1 ? team->cluster.max_local : 1;
}
/* Bytes of one element of args' dtype times n. */
double shoal_algo_bytes(const shoal_coll_args_t *args, size_t n);

/* Start plan for args: zeroed, the arguments, element size, piece size
 * (chunk_size / esize) and the prims' team, dtype, esize and the plain
 * stage; with reduces, also the op's kernel (AVG: the SUM kernel, avg_n
 * left 0). SHOAL_ERR_INTERNAL for a dtype or op that has no kernel. */
shoal_status_t shoal_plan_init(shoal_team_t *team, const shoal_coll_args_t *args,
                               int reduces, shoal_plan_t *plan);
/* From an algorithm's plan function: its runs need bytes of working
 * memory (the most of several calls), allocated by shoal_plan_create. */
void shoal_plan_reserve(shoal_plan_t *plan, size_t bytes);
/* The plan's working memory, of at least bytes; SHOAL_ERR_INTERNAL when
 * the plan reserved less (a run never allocates). */
shoal_status_t shoal_plan_scratch(shoal_plan_t *plan, size_t bytes, void **buf_p);
/* A plan of algo for args, made by algo->plan in memory of its own, with
 * its staged input and working memory allocated and registered. */
shoal_status_t shoal_plan_create(shoal_team_t *team, const shoal_algo_ops_t *algo,
                                 const shoal_coll_args_t *args, shoal_plan_t **plan_p);
/* Run plan for args, a call of the shape it was made for (its buffers, and
 * a codec's state and residual, may differ from the last run's; with
 * staged input, the caller has filled plan->input). */
shoal_status_t shoal_plan_run(shoal_plan_t *plan, const shoal_coll_args_t *args);
/* Free plan and what it owns; NULL is ignored. */
void shoal_plan_destroy(shoal_plan_t *plan);
/* team's plan of algo for args: the cached one of args' collective when it
 * was made for the same shape and settings, else a new one that replaces
 * it (all-to-all-v calls, whose counts differ per call, get one that is
 * not cached: the caller destroys it when *cached_p is 0). Executor only. */
shoal_status_t shoal_plan_get(shoal_team_t *team, const shoal_algo_ops_t *algo,
                              const shoal_coll_args_t *args, shoal_plan_t **plan_p,
                              int *cached_p);
/* Destroy every plan team keeps (its destroy). */
void shoal_plan_cache_release(shoal_team_t *team);

/* Bind the stage of args to an initialised plan: the codec stage with the
 * codec and residual when args carries a codec (fp32 only), and its piece
 * in stage_elems. SHOAL_ERR_INTERNAL when no piece of it fits a slot. */
shoal_status_t shoal_plan_stage(shoal_team_t *team, const shoal_coll_args_t *args,
                                shoal_plan_t *plan);

/* Plan of the ring algorithms that reduce (all-reduce, reduce-scatter):
 * neighbours rank+-1, pieces of chunk_size, the op's kernel, AVG over n. */
shoal_status_t shoal_ring_reduce_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan);

/* The algorithms, by collective. */
extern const shoal_algo_ops_t shoal_ring_allreduce_ops, shoal_tree_allreduce_ops,
    shoal_rhd_allreduce_ops, shoal_oneshot_allreduce_ops, shoal_hier_allreduce_ops;
extern const shoal_algo_ops_t shoal_ring_reduce_scatter_ops, shoal_rhd_reduce_scatter_ops,
    shoal_hier_reduce_scatter_ops;
extern const shoal_algo_ops_t shoal_ring_allgather_ops, shoal_rhd_allgather_ops,
    shoal_hier_allgather_ops;
extern const shoal_algo_ops_t shoal_chain_broadcast_ops, shoal_binomial_broadcast_ops,
    shoal_hier_broadcast_ops;
extern const shoal_algo_ops_t shoal_chain_reduce_ops, shoal_binomial_reduce_ops;
/* Serve both SHOAL_COLL_ALLTOALL and SHOAL_COLL_ALLTOALLV. */
extern const shoal_algo_ops_t shoal_pairwise_alltoall_ops, shoal_direct_alltoall_ops,
    shoal_hier_alltoall_ops; /* SHOAL_COLL_ALLTOALL only */
extern const shoal_algo_ops_t shoal_direct_gather_ops, shoal_ring_gather_ops;
extern const shoal_algo_ops_t shoal_direct_scatter_ops, shoal_ring_scatter_ops;
/* The compressed all-reduces: never selected by cost, but by
 * shoal_codec_algo_select for a call whose args carry a codec. */
extern const shoal_algo_ops_t shoal_ring_codec_allreduce_ops, shoal_twoshot_codec_allreduce_ops,
    shoal_hier_codec_allreduce_ops, shoal_tree_codec_allreduce_ops;
/* The compressed reduce-scatters (ring_rsag.c, twoshot.c), the same way. */
extern const shoal_algo_ops_t shoal_ring_codec_rs_ops, shoal_twoshot_codec_rs_ops,
    shoal_hier_codec_rs_ops, shoal_ring_codec_ag_ops;
/* Single copy over shared memory (put.h; put_*.c): named "put"; each
 * falls back to the slot algorithm the model would pick, collectively,
 * when a buffer it needs is not reachable by every peer that needs it. */
extern const shoal_algo_ops_t shoal_put_allgather_ops, shoal_put_alltoall_ops,
    shoal_put_broadcast_ops, shoal_put_gather_ops, shoal_put_scatter_ops,
    shoal_put_reduce_scatter_ops, shoal_put_allreduce_ops;
/* SHOAL_COLL_SEND and SHOAL_COLL_RECV outside a group. */
extern const shoal_algo_ops_t shoal_p2p_ops;

/* Check SHOAL_ALGO against the known names: "auto", a name (every
 * collective that has an algorithm of that name uses it), or a list
 * "coll:name,coll:name" (coll as shoal_coll_kind_name, or "all").
 * SHOAL_ERR_INVALID_ARG with a logged reason for an unknown collective or
 * algorithm. */
shoal_status_t shoal_algo_check_setting(void);

/* The algorithm for args: the one SHOAL_ALGO forces for args->kind if it can
 * serve the call (else a warning and the cost model's choice), otherwise the
 * cheapest by cost. Logs the choice and its estimate at INFO (ALGO). NULL
 * only when no algorithm can serve the call. */
const shoal_algo_ops_t *shoal_algo_select(const shoal_team_t *team,
                                          const shoal_coll_args_t *args);
/* shoal_algo_select for a call about to run: the communicator remembers the
 * last choice per collective, and a call with the same count, type, op and
 * root takes it without asking the cost model again. */
const shoal_algo_ops_t *shoal_algo_choose(shoal_team_t *team,
                                          const shoal_coll_args_t *args);

/* The schedule of a compressed all-reduce (args->codec set, checked):
 * args->codec_algo RING the ring, TWO_SHOT the two-shot, TREE the double
 * binary tree (never chosen by AUTO); AUTO the hierarchical one across
 * several hosts, else the ring up to 8 ranks and the two-shot beyond (the
 * ring requantises at every hop, so its error grows with its length),
 * except for shared-scale codecs (ternary), whose ring sums are exact.
 * Logs the choice at INFO (ALGO). NULL for an unknown codec_algo. */
const shoal_algo_ops_t *shoal_codec_algo_select(const shoal_team_t *team,
                                                const shoal_coll_args_t *args);

/* The i-th algorithm of kind (NULL past the last), for listings. */
const shoal_algo_ops_t *shoal_algo_at(shoal_coll_kind_t kind, int i);

/* The algorithm of kind named name (NULL if none), for tests and the bench. */
const shoal_algo_ops_t *shoal_algo_find(shoal_coll_kind_t kind, const char *name);

#endif
