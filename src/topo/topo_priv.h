/* What topo.c builds and topo_near.c reads: the loaded topology with the
 * hwloc objects behind each GPU and NIC record. Private to src/topo/. */
#ifndef SHOAL_TOPO_PRIV_H
#define SHOAL_TOPO_PRIV_H

#include "topo.h"

struct shoal_topo {
    hwloc_topology_t hw;
    char source[320];
    int live;
    shoal_topo_counts_t counts;
    int ngpus;
    shoal_topo_gpu_t *gpus;
    /* The PCI device of each GPU (or its OS device where it has none):
     * the object hops are counted from. */
    hwloc_obj_t *gpu_objs;
    int nnics;
    shoal_topo_nic_t *nics;
    hwloc_obj_t *nic_objs;
    uint64_t *numa_dist;    /* counts.nnuma squared, or NULL */
    uint64_t *nvlink;       /* ngpus squared, or NULL */
    int *ring;              /* ngpus */
    hwloc_bitmap_t binding;
    int binding_numa;
};

/* Parent hops from a and from b up to their first common ancestor, added;
 * -1 when they have none (objects of two topologies). */
int shoal_topo_obj_hops(hwloc_obj_t a, hwloc_obj_t b);

/* The logical index of the one NUMA node nearest obj, -1 when its
 * locality spans several. */
int shoal_topo_obj_numa(const shoal_topo_t *topo, hwloc_obj_t obj);

/* Fill numa_dist, nvlink and ring once the GPUs and NICs are known.
 * Returns SHOAL_OK or SHOAL_ERR_NO_MEMORY. */
shoal_status_t shoal_topo_build_distances(shoal_topo_t *topo);
shoal_status_t shoal_topo_build_ring(shoal_topo_t *topo);

#endif
