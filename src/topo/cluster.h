/* The cluster view: which ranks share a host, where each sits inside its
 * host, and the orders the algorithms follow. Every rank builds the same
 * view from the init exchange (host identities and places), so decisions
 * taken from it agree on every rank without more messages.
 *
 * Ownership: the arrays belong to the cluster, from shoal_cluster_build to
 * shoal_cluster_free. Read-only once built, so any thread may read it. */
#ifndef SHOAL_CLUSTER_H
#define SHOAL_CLUSTER_H

#include "shoal.h"

#include <stdint.h>
#include <stdio.h>

/* Where a rank sits on its host: the NUMA node of its binding and the
 * nearest GPU and NIC (indexes into its host's topology lists), -1 when
 * unknown or not one. */
typedef struct {
    int32_t numa;
    int32_t gpu;
    int32_t nic;
} shoal_place_t;

/* This process's place, from the topology the settings name (loaded once
 * per process and kept; loaded again when SHOAL_TOPO_FILE or
 * SHOAL_TOPO_SYNTHETIC change). When no topology can be read, every field
 * is -1 and a warning is logged once. Thread-safe. */
void shoal_place_self(shoal_place_t *place_p);
/* The OpenFabrics device name of NIC nic of this host's topology (a
 * place's nic), or "" when it has none or nic is -1. Thread-safe. */
void shoal_place_nic_name(int nic, char *name, size_t cap);
/* The CPUs this host's topology lets its processes run on (not just this
 * process's binding), or 0 when no topology can be read. Thread-safe. */
int shoal_place_cpus(void);

/* Bind this process for a communicator where it is rank, at local
 * position pos of the nlocal ranks on its host, each in a process of its
 * own: SHOAL_CPU_BIND and shoal_topo_bind_pick say whether and where. A
 * process that shoal bound already stays as it is. Returns 1 when the
 * communicator holds shoal's binding and must give it back with
 * shoal_place_unbind when it ends, 0 otherwise. A binding that cannot be
 * read or set is logged and the process left unbound: never an error.
 * Thread-safe. */
int shoal_place_bind(int rank, int pos, int nlocal);
/* Gives back one hold; the last puts back the binding from before. */
void shoal_place_unbind(void);

typedef struct {
    int nranks;
    int nhosts;
    const int *host_of;  /* borrowed: dense host index of each rank */
    shoal_place_t *place; /* each rank's place */
    /* Ranks grouped by host, and inside a host by NUMA node, then rank:
     * host h holds by_host[host_start[h] .. host_start[h + 1]). This is
     * also the ring order: neighbours share a host, and a NUMA node where
     * they can. */
    int *host_start;
    int *by_host;
    int *local_of;       /* position of each rank inside its host's list */
    int *ring_pos;       /* position of each rank in by_host */
    int min_local;       /* fewest ranks on a host */
    int max_local;       /* most ranks on a host */
    int cross_numa;      /* some host has ranks on different NUMA nodes */
    /* Rails, for the hierarchical algorithms: rail j (j < max_local) joins
     * one rank of every host, rail_ranks[j * nhosts + h], the owner of rail
     * j on host h: local position j * nlocal(h) / max_local, so a host with
     * fewer ranks gives each of them a run of consecutive rails, and a
     * host with max_local ranks gives rank j rail j. rail_start[j] counts
     * the ranks at local position < j over all hosts (max_local + 1
     * entries): rail-major order, the order the hierarchical
     * reduce-scatter and all-gather stage their blocks in. */
    int *rail_ranks;
    int *rail_start;
    /* The same rails owned by the other rule, local position j mod
     * nlocal(h), which keeps rail j on the rank at position j wherever a
     * host has one (the hierarchical reduce-scatter and all-gather, whose
     * blocks belong to ranks): rail_mod_ranks[j * nhosts + h]. */
    int *rail_mod_ranks;
} shoal_cluster_t;

/* 1 when the places of every two ranks of host h of c name GPUs that
 * this process's topology joins by NVLink (or the same GPU); 0 when a
 * place has no GPU or the topology does not say. Ranks of one host read
 * the same topology, so they answer alike. Thread-safe. */
int shoal_place_gpus_nvlinked(const shoal_cluster_t *c, int host);

/* Build the view of nranks ranks: host_of[r] in 0..nhosts-1 (kept, not
 * copied: it must outlive the cluster), places[r] copied. SHOAL_OK or
 * SHOAL_ERR_NO_MEMORY (then c holds nothing to free). */
shoal_status_t shoal_cluster_build(shoal_cluster_t *c, int nranks, const int *host_of,
                                   int nhosts, const shoal_place_t *places);
void shoal_cluster_free(shoal_cluster_t *c);

/* Ranks on host h. */
static inline int shoal_cluster_nlocal(const shoal_cluster_t *c, int h)
{
    return c->host_start[h + 1] - c->host_start[h];
}

/* The rank at local position j of host h (j < shoal_cluster_nlocal). */
static inline int shoal_cluster_rank_at(const shoal_cluster_t *c, int h, int j)
{
    return c->by_host[c->host_start[h] + j];
}

/* Owner of rail j on host h: a local position. */
static inline int shoal_cluster_rail_owner(const shoal_cluster_t *c, int h, int j)
{
    return (int)((long)j * shoal_cluster_nlocal(c, h) / c->max_local);
}

/* The rails local position j of host h owns: [*first_p, *end_p). */
void shoal_cluster_owned_rails(const shoal_cluster_t *c, int h, int j, int *first_p,
                               int *end_p);

/* Rails as host h stages them for the hierarchical reduce-scatter and
 * all-gather: owner-major (the rails of local position 0, then of 1, ...;
 * position q owns rails q, q + nlocal(h), ...), each rail's blocks in host
 * order. Returns where rail j starts, in blocks; j == max_local gives the
 * total. */
int shoal_cluster_stage_off(const shoal_cluster_t *c, int h, int j);

/* The text picture of the cluster (shoal_info -T -C): hosts with their
 * ranks and each rank's place, the rails and the ring order. host_ids[h]
 * names host h (NULL: numbers only). */
void shoal_cluster_print(const shoal_cluster_t *c, const char *const *host_names, FILE *out);

/* Blocks of rail j: the hosts that hold a rank at local position j. */
static inline int shoal_cluster_rail_size(const shoal_cluster_t *c, int j)
{
    return c->rail_start[j + 1] - c->rail_start[j];
}

#endif
