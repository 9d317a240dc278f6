/* The simulator: the real algorithm schedules of src/algos/, run by every
 * rank of a made-up cluster of N hosts x M ranks in one process, over a
 * simulated transport that keeps virtual time instead of moving data.
 *
 * Each rank is a fiber with a communicator of its own, built without a
 * bootstrap, dry (comm.h: no byte of payload is read or written) and
 * joined to every other rank by a simulated endpoint. The transport
 * charges the figures of the link classes (topo/links.h):
 * - inside a host, writing a piece into a slot costs the sender
 *   bytes / bandwidth and reading it out (copy or reduce) costs the
 *   receiver the same; the piece arrives one latency after it was written;
 * - between hosts, a piece also crosses the sending host's link out and the
 *   receiving host's link in, each carrying one piece at a time at the
 *   class's bandwidth (every rank of a host shares them), then one latency.
 * Every rank keeps a clock; waiting for a piece or a free slot moves the
 * clock to the moment it arrived or was freed. The slot FIFOs have the
 * depth of the real transports' (SHOAL_SHM_NSLOTS inside a host,
 * SHOAL_TCP_NSLOTS between hosts), so pipelining and back-pressure are the
 * schedule's own. An operation starts with every clock equal; its
 * predicted time is the latest clock at the end. A schedule that
 * deadlocks is an error naming the ranks still waiting. */
#ifndef SHOAL_SIM_H
#define SHOAL_SIM_H

#include "algos/algo.h"
#include "topo/links.h"

typedef struct {
    int nhosts;          /* N */
    int per_host;        /* M ranks on each host */
    int numa_per_host;   /* > 1: the ranks of a host split evenly over this many NUMA nodes */
    size_t chunk_size;   /* 0: SHOAL_CHUNK_SIZE */
    shoal_links_t links; /* the class figures, with intra and inter chosen */
} shoal_sim_config_t;

/* Defaults: links from shoal_links_defaults then SHOAL_TOPO_LINKS, TCP
 * between hosts. */
shoal_status_t shoal_sim_config_init(shoal_sim_config_t *cfg, int nhosts, int per_host);

typedef struct shoal_sim shoal_sim_t;

shoal_status_t shoal_sim_create(const shoal_sim_config_t *cfg, shoal_sim_t **sim_p);
void shoal_sim_destroy(shoal_sim_t *sim);

/* Run one call of kind on every rank (a SUM; root 0 for rooted kinds;
 * not all-to-all-v, send or recv): count as shoal_coll_args_t has it, with
 * algorithm algo (NULL: the cost model's choice). *time_p: the predicted
 * seconds; *algo_p (when not NULL): the algorithm's name.
 * SHOAL_ERR_INVALID_ARG for an algorithm that cannot serve the call; the
 * schedule's own error (SHOAL_ERR_TIMEOUT for a deadlock, naming the
 * waiting ranks in the log) otherwise. */
shoal_status_t shoal_sim_run(shoal_sim_t *sim, shoal_coll_kind_t kind, size_t count,
                             shoal_dtype_t dtype, const shoal_algo_ops_t *algo,
                             double *time_p, const char **algo_p);

/* Compressed all-reduces (and reduce-scatters, whose residual is shaped
 * as their input): from now on, shoal_sim_run's all-reduces are
 * compressed through codec (borrowed until this is called again; NULL
 * goes back to plain ones) with schedule algo (shoal_compress_algo_t) and
 * an error-feedback residual, as shoal_allreduce_codec runs them: with
 * algo NULL, shoal_codec_algo_select picks the codec schedule. They take
 * SHOAL_FLOAT32 only (SHOAL_ERR_INVALID_ARG otherwise). The codec's data
 * (ternary scales) is never read: dry runs only count its passes. */
void shoal_sim_set_codec(shoal_sim_t *sim, const shoal_codec_t *codec, int algo);

/* Transport memory of a rank between hosts (tcp's), as lazy tcp would
 * hold it after the runs since create or shoal_sim_forget_peers: every
 * pair counts as connected once either end asked its endpoint to the
 * other for a slot, and its slots follow tcp's slot rule
 * (shoal_tcp_slots_rule, SHOAL_TCP_MEM, in the order of the peers'
 * ranks); eager tcp holds every peer at SHOAL_TCP_NSLOTS. Slot bytes
 * count both directions, SHOAL_CHUNK_SIZE each. */
typedef struct {
    int peers_all;      /* ranks on other hosts: what eager tcp connects */
    int peers_touched;  /* of them, those a run moved data with */
    size_t bytes_eager; /* every peer, SHOAL_TCP_NSLOTS slots each way */
    size_t bytes_lazy;  /* the touched peers, by the slot rule */
} shoal_sim_mem_t;

void shoal_sim_memory(const shoal_sim_t *sim, int rank, shoal_sim_mem_t *mem_p);
void shoal_sim_forget_peers(shoal_sim_t *sim);

/* Ranks, and the team of a rank (its cluster view, costs and endpoints). */
int shoal_sim_nranks(const shoal_sim_t *sim);
shoal_team_t *shoal_sim_team(shoal_sim_t *sim, int rank);

#endif
