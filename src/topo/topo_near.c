/* Closeness inside one host: parent hops between devices, the nearest NIC
 * of a GPU or of a rank's CPUs, the NUMA and NVLink matrices hwloc
 * records, the link class of a GPU pair and the GPU ring order. */
#include "topo_priv.h"

#include "base/log.h"

#include <stdlib.h>
#include <string.h>

/* Deeper than any real tree (machine, groups, package, caches, bridges). */
#define TOPO_MAX_ANCESTORS 128

int shoal_topo_obj_hops(hwloc_obj_t a, hwloc_obj_t b)
{
    /* I/O objects have negative depths, so hwloc's depth-based common
     * ancestor does not apply: list a's ancestors and walk up from b. */
    hwloc_obj_t up[TOPO_MAX_ANCESTORS];
    int n = 0;
    for (hwloc_obj_t o = a; o && n < TOPO_MAX_ANCESTORS; o = o->parent)
        up[n++] = o;
    int hb = 0;
    for (hwloc_obj_t o = b; o; o = o->parent, hb++)
        for (int ha = 0; ha < n; ha++)
            if (up[ha] == o)
                return ha + hb;
    return -1;
}

int shoal_topo_gpu_nic_hops(const shoal_topo_t *topo, int gpu, int nic)
{
    if (gpu < 0 || gpu >= topo->ngpus || nic < 0 || nic >= topo->nnics)
        return -1;
    return shoal_topo_obj_hops(topo->gpu_objs[gpu], topo->nic_objs[nic]);
}

/* The entry of objs[0..n) with the fewest hops from from, ties to the
 * lowest index; -1 when n is 0. */
static int topo_nearest(hwloc_obj_t from, hwloc_obj_t *objs, int n, int *hops_p)
{
    int best = -1, best_hops = 0;
    for (int i = 0; i < n; i++) {
        int h = shoal_topo_obj_hops(from, objs[i]);
        if (h >= 0 && (best < 0 || h < best_hops)) {
            best = i;
            best_hops = h;
        }
    }
    if (best >= 0 && hops_p)
        *hops_p = best_hops;
    return best;
}

int shoal_topo_nearest_nic(const shoal_topo_t *topo, int gpu, int *hops_p)
{
    if (gpu < 0 || gpu >= topo->ngpus)
        return -1;
    return topo_nearest(topo->gpu_objs[gpu], topo->nic_objs, topo->nnics, hops_p);
}

int shoal_topo_nearest_gpu(const shoal_topo_t *topo, int nic, int *hops_p)
{
    if (nic < 0 || nic >= topo->nnics)
        return -1;
    return topo_nearest(topo->nic_objs[nic], topo->gpu_objs, topo->ngpus, hops_p);
}

/* A device whose CPUs (those of its first non-I/O ancestor) intersect set
 * beats one whose CPUs do not; among equals, fewest hops from the object
 * that covers set. */
static int topo_nearest_of_cpuset(const shoal_topo_t *topo, hwloc_const_cpuset_t set,
                                  hwloc_obj_t *objs, int n, int *hops_p)
{
    if (!set || hwloc_bitmap_iszero(set))
        return -1;
    hwloc_obj_t from = hwloc_get_obj_covering_cpuset(topo->hw, set);
    if (!from)
        from = hwloc_get_root_obj(topo->hw);
    int best = -1, best_local = 0, best_hops = 0;
    for (int i = 0; i < n; i++) {
        hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo->hw, objs[i]);
        int local = anc && anc->cpuset && hwloc_bitmap_intersects(anc->cpuset, set);
        int h = shoal_topo_obj_hops(from, objs[i]);
        if (h < 0)
            continue;
        if (best < 0 || local > best_local || (local == best_local && h < best_hops)) {
            best = i;
            best_local = local;
            best_hops = h;
        }
    }
    if (best >= 0 && hops_p)
        *hops_p = best_hops;
    return best;
}

int shoal_topo_nearest_nic_of_cpuset(const shoal_topo_t *topo, hwloc_const_cpuset_t set,
                                     int *hops_p)
{
    return topo_nearest_of_cpuset(topo, set, topo->nic_objs, topo->nnics, hops_p);
}

int shoal_topo_nearest_gpu_of_cpuset(const shoal_topo_t *topo, hwloc_const_cpuset_t set,
                                     int *hops_p)
{
    return topo_nearest_of_cpuset(topo, set, topo->gpu_objs, topo->ngpus, hops_p);
}

/* The GPU an object of the NVLink matrix stands for: one of its OS
 * devices, or its PCI device; -1 for anything else (a CPU, an NVSwitch). */
static int topo_gpu_of(const shoal_topo_t *topo, hwloc_obj_t obj)
{
    for (int g = 0; g < topo->ngpus; g++) {
        if (topo->gpu_objs[g] == obj)
            return g;
        if (obj->type == HWLOC_OBJ_OS_DEVICE) {
            for (hwloc_obj_t o = obj->parent; o; o = o->parent)
                if (o == topo->gpu_objs[g])
                    return g;
        }
    }
    return -1;
}

static shoal_status_t topo_build_numa(shoal_topo_t *topo)
{
    unsigned nr = 1;
    struct hwloc_distances_s *d = NULL;
    if (hwloc_distances_get_by_type(topo->hw, HWLOC_OBJ_NUMANODE, &nr, &d,
                                    HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0 || nr == 0)
        return SHOAL_OK;
    int n = topo->counts.nnuma;
    shoal_status_t s = SHOAL_OK;
    if (n > 0 && d->nbobjs == (unsigned)n) {
        topo->numa_dist = calloc((size_t)n * (size_t)n, sizeof(*topo->numa_dist));
        if (!topo->numa_dist) {
            shoal_error(TOPO, "cannot allocate a %dx%d NUMA distance matrix", n, n);
            s = SHOAL_ERR_NO_MEMORY;
            goto out_release;
        }
        /* The matrix may list the nodes in any order: store it by logical
         * index, the numbering every other query uses. */
        for (unsigned i = 0; i < d->nbobjs; i++)
            for (unsigned j = 0; j < d->nbobjs; j++)
                topo->numa_dist[d->objs[i]->logical_index * (unsigned)n +
                                d->objs[j]->logical_index] = d->values[i * d->nbobjs + j];
    } else {
        shoal_debug(TOPO, "NUMA distances cover %u of %d nodes; not used", d->nbobjs, n);
    }
out_release:
    hwloc_distances_release(topo->hw, d);
    return s;
}

static uint64_t topo_min(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static int topo_is_switch(const struct hwloc_distances_s *d, const int *gpu, unsigned k)
{
    return gpu[k] < 0 && d->objs[k]->type == HWLOC_OBJ_PCI_DEVICE;
}

static shoal_status_t topo_build_nvlink(shoal_topo_t *topo)
{
    unsigned nr = 1;
    struct hwloc_distances_s *d = NULL;
    int ng = topo->ngpus;
    if (ng == 0 ||
        hwloc_distances_get_by_name(topo->hw, "NVLinkBandwidth", &nr, &d, 0) != 0 || nr == 0)
        return SHOAL_OK;
    shoal_status_t s = SHOAL_OK;
    unsigned n = d->nbobjs;
    int *gpu = calloc(n, sizeof(*gpu));
    topo->nvlink = calloc((size_t)ng * (size_t)ng, sizeof(*topo->nvlink));
    if (!gpu || !topo->nvlink) {
        shoal_error(TOPO, "cannot allocate the NVLink matrix of %d GPUs", ng);
        free(topo->nvlink);
        topo->nvlink = NULL;
        s = SHOAL_ERR_NO_MEMORY;
        goto out_free;
    }
    for (unsigned i = 0; i < n; i++)
        gpu[i] = topo_gpu_of(topo, d->objs[i]);
    /* Direct links between two GPUs, then the links through each NVSwitch
     * (a PCI device of the matrix): a pair gets the lesser of its two
     * links to the switch. CPUs in the matrix (POWER) carry no GPU-GPU
     * traffic and are left out. */
    for (unsigned i = 0; i < n; i++) {
        if (gpu[i] < 0)
            continue;
        for (unsigned j = 0; j < n; j++) {
            if (gpu[j] < 0)
                continue;
            uint64_t bw = d->values[i * n + j];
            for (unsigned k = 0; k < n && i != j; k++)
                if (topo_is_switch(d, gpu, k))
                    bw += topo_min(d->values[i * n + k], d->values[k * n + j]);
            topo->nvlink[gpu[i] * ng + gpu[j]] += bw;
        }
    }
out_free:
    free(gpu);
    hwloc_distances_release(topo->hw, d);
    return s;
}

shoal_status_t shoal_topo_build_distances(shoal_topo_t *topo)
{
    shoal_status_t s = topo_build_numa(topo);
    if (s != SHOAL_OK)
        return s;
    return topo_build_nvlink(topo);
}

int shoal_topo_numa_distance(const shoal_topo_t *topo, int i, int j, uint64_t *value_p)
{
    int n = topo->counts.nnuma;
    if (!topo->numa_dist || i < 0 || j < 0 || i >= n || j >= n)
        return -1;
    *value_p = topo->numa_dist[i * n + j];
    return 0;
}

int shoal_topo_has_numa_distances(const shoal_topo_t *topo)
{
    return topo->numa_dist != NULL;
}

uint64_t shoal_topo_nvlink_bw(const shoal_topo_t *topo, int i, int j)
{
    if (!topo->nvlink || i < 0 || j < 0 || i >= topo->ngpus || j >= topo->ngpus)
        return 0;
    return topo->nvlink[i * topo->ngpus + j];
}

int shoal_topo_has_nvlink(const shoal_topo_t *topo)
{
    return topo->nvlink != NULL;
}

shoal_link_class_t shoal_topo_gpu_link(const shoal_topo_t *topo, int i, int j)
{
    return shoal_topo_nvlink_bw(topo, i, j) > 0 ? SHOAL_LINK_GPU_NVLINK : SHOAL_LINK_GPU_PCIE;
}

/* The sort key of a GPU in the ring: NUMA node, the PCIe switch it sits
 * under (the topmost PCI-to-PCI bridge of its chain, "" when none), its bus
 * id. GPUs that share a switch then sit side by side, and the ring crosses
 * between NUMA nodes only twice. */
static const char *topo_gpu_switch(const shoal_topo_gpu_t *g)
{
    const char *sw = "";
    for (int k = 0; k < g->npci; k++)
        if (strncmp(g->pci_chain[k], "host:", 5))
            sw = g->pci_chain[k];
    return sw;
}

static int topo_ring_before(const shoal_topo_gpu_t *a, const shoal_topo_gpu_t *b)
{
    if (a->numa != b->numa)
        return a->numa < b->numa;
    int c = strcmp(topo_gpu_switch(a), topo_gpu_switch(b));
    if (c)
        return c < 0;
    c = strcmp(a->busid, b->busid);
    if (c)
        return c < 0;
    return a->index < b->index;
}

shoal_status_t shoal_topo_build_ring(shoal_topo_t *topo)
{
    if (topo->ngpus == 0)
        return SHOAL_OK;
    topo->ring = malloc((size_t)topo->ngpus * sizeof(*topo->ring));
    if (!topo->ring) {
        shoal_error(TOPO, "cannot allocate the ring of %d GPUs", topo->ngpus);
        return SHOAL_ERR_NO_MEMORY;
    }
    for (int i = 0; i < topo->ngpus; i++) {
        int g = i, j = i;
        for (; j > 0 && topo_ring_before(&topo->gpus[g], &topo->gpus[topo->ring[j - 1]]); j--)
            topo->ring[j] = topo->ring[j - 1];
        topo->ring[j] = g;
    }
    return SHOAL_OK;
}

void shoal_topo_gpu_ring(const shoal_topo_t *topo, int *order_p)
{
    if (topo->ngpus > 0)
        memcpy(order_p, topo->ring, (size_t)topo->ngpus * sizeof(*order_p));
}
