/* Loading a topology through hwloc and listing what it holds: counts of
 * packages, NUMA nodes, cores and caches, and the GPUs and NICs, each
 * physical device once however many OS devices name it. */
#include "topo_priv.h"

#include "base/config.h"
#include "base/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    TOPO_FROM_LIVE,
    TOPO_FROM_XML,
    TOPO_FROM_SYNTHETIC,
} topo_from_t;

static const char *const link_class_names[] = {
#define SHOAL_LINK_CLASS_NAME_(name, text) text,
    SHOAL_LINK_CLASS_LIST(SHOAL_LINK_CLASS_NAME_)
#undef SHOAL_LINK_CLASS_NAME_
};

const char *shoal_link_class_name(shoal_link_class_t cls)
{
    if ((int)cls < 0 || cls >= SHOAL_LINK_CLASS_COUNT)
        return "unknown";
    return link_class_names[cls];
}

static void topo_busid(const struct hwloc_pcidev_attr_s *pci, char out[SHOAL_TOPO_BUSID_MAX])
{
    snprintf(out, SHOAL_TOPO_BUSID_MAX, "%04x:%02x:%02x.%01x", (unsigned)pci->domain,
             (unsigned)pci->bus, (unsigned)pci->dev, (unsigned)pci->func);
}

/* The PCI device an OS device hangs from, or NULL (a virtual device). */
static hwloc_obj_t topo_pci_parent(hwloc_obj_t osdev)
{
    for (hwloc_obj_t o = osdev->parent; o; o = o->parent) {
        if (o->type == HWLOC_OBJ_PCI_DEVICE)
            return o;
        if (o->type != HWLOC_OBJ_OS_DEVICE)
            return NULL;
    }
    return NULL;
}

int shoal_topo_obj_numa(const shoal_topo_t *topo, hwloc_obj_t obj)
{
    hwloc_obj_t anc = obj->type == HWLOC_OBJ_NUMANODE
                          ? obj
                          : hwloc_get_non_io_ancestor_obj(topo->hw, obj);
    if (!anc || !anc->nodeset || hwloc_bitmap_weight(anc->nodeset) != 1)
        return -1;
    hwloc_obj_t node =
        hwloc_get_numanode_obj_by_os_index(topo->hw, (unsigned)hwloc_bitmap_first(anc->nodeset));
    return node ? (int)node->logical_index : -1;
}

/* The number after a name's letters ("cuda3" -> 3), or -1. */
static int topo_name_number(const char *name, const char *prefix)
{
    size_t len = strlen(prefix);
    if (strncmp(name, prefix, len) || name[len] < '0' || name[len] > '9')
        return -1;
    return atoi(name + len);
}

static int topo_is_cuda(hwloc_obj_t o)
{
    return (o->subtype && !strcmp(o->subtype, "CUDA")) || topo_name_number(o->name, "cuda") >= 0;
}

static int topo_is_nvml(hwloc_obj_t o)
{
    return (o->subtype && !strcmp(o->subtype, "NVML")) || topo_name_number(o->name, "nvml") >= 0;
}

/* Compute devices: CUDA and NVML devices by subtype or name (old files
 * have no subtype), and coprocessors of other compute APIs (ROCm, Level
 * Zero). OpenCL devices are left out: they show again a device that its
 * native API lists, sometimes on another PCI function of the same card,
 * where it would count twice. A DRM "card" or "renderD" alone is a display
 * adapter that shoal cannot drive. */
static int topo_osdev_is_gpu(hwloc_obj_t o)
{
    hwloc_obj_osdev_type_t t = o->attr->osdev.type;
    if (t != HWLOC_OBJ_OSDEV_GPU && t != HWLOC_OBJ_OSDEV_COPROC)
        return 0;
    if (topo_is_cuda(o) || topo_is_nvml(o))
        return 1;
    return t == HWLOC_OBJ_OSDEV_COPROC && !(o->subtype && !strcmp(o->subtype, "OpenCL")) &&
           strncmp(o->name, "opencl", 6);
}

static int topo_osdev_is_nic(hwloc_obj_t o)
{
    hwloc_obj_osdev_type_t t = o->attr->osdev.type;
    return t == HWLOC_OBJ_OSDEV_OPENFABRICS || t == HWLOC_OBJ_OSDEV_NETWORK;
}

/* Put name at position at of a record's list of names (dropped when the
 * list is full: four names per device is more than hwloc gives). */
static void topo_insert_name(char names[][SHOAL_TOPO_NAME_MAX], int *nnames_p, int at,
                             const char *name)
{
    if (*nnames_p == SHOAL_TOPO_NAMES_MAX)
        return;
    memmove(names[at + 1], names[at], (size_t)(*nnames_p - at) * SHOAL_TOPO_NAME_MAX);
    snprintf(names[at], SHOAL_TOPO_NAME_MAX, "%s", name);
    (*nnames_p)++;
}

/* CUDA names first (the index programs use), then NVML, then the rest. */
static int topo_gpu_name_rank(const char *name)
{
    if (topo_name_number(name, "cuda") >= 0)
        return 0;
    return topo_name_number(name, "nvml") >= 0 ? 1 : 2;
}

static void topo_add_gpu_name(shoal_topo_gpu_t *g, const char *name)
{
    int at = 0;
    while (at < g->nnames && topo_gpu_name_rank(g->names[at]) <= topo_gpu_name_rank(name))
        at++;
    topo_insert_name(g->names, &g->nnames, at, name);
}

static void topo_fill_chain(shoal_topo_gpu_t *g, hwloc_obj_t dev)
{
    for (hwloc_obj_t o = dev->parent; o && o->type == HWLOC_OBJ_BRIDGE; o = o->parent) {
        if (g->npci == SHOAL_TOPO_PCI_CHAIN_MAX)
            break;
        char *out = g->pci_chain[g->npci++];
        if (o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)
            topo_busid(&o->attr->bridge.upstream.pci, out);
        else
            snprintf(out, SHOAL_TOPO_BUSID_MAX, "host:%04x:%02x",
                     (unsigned)o->attr->bridge.downstream.pci.domain,
                     (unsigned)o->attr->bridge.downstream.pci.secondary_bus);
    }
}

/* The record for the device key (a PCI device, or the OS device itself),
 * created when it is new. objs holds the keys of the n records so far. */
static int topo_record(hwloc_obj_t *objs, int *n_p, hwloc_obj_t key)
{
    for (int i = 0; i < *n_p; i++)
        if (objs[i] == key)
            return i;
    objs[*n_p] = key;
    return (*n_p)++;
}

/* The number a GPU is known by: its CUDA index, else its NVML one; GPUs
 * are listed in that order so that index i is CUDA device i. */
static int topo_gpu_key(const shoal_topo_gpu_t *g)
{
    for (int k = 0; k < g->nnames; k++) {
        int n = topo_name_number(g->names[k], "cuda");
        if (n >= 0)
            return n;
    }
    for (int k = 0; k < g->nnames; k++) {
        int n = topo_name_number(g->names[k], "nvml");
        if (n >= 0)
            return n;
    }
    return 1 << 20;
}

static shoal_status_t topo_find_devices(shoal_topo_t *topo)
{
    int nosdev = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo->hw, o));)
        nosdev++;
    if (nosdev == 0)
        return SHOAL_OK;
    topo->gpus = calloc((size_t)nosdev, sizeof(*topo->gpus));
    topo->gpu_objs = calloc((size_t)nosdev, sizeof(*topo->gpu_objs));
    topo->nics = calloc((size_t)nosdev, sizeof(*topo->nics));
    topo->nic_objs = calloc((size_t)nosdev, sizeof(*topo->nic_objs));
    if (!topo->gpus || !topo->gpu_objs || !topo->nics || !topo->nic_objs) {
        shoal_error(TOPO, "cannot allocate the device lists of %d OS devices", nosdev);
        return SHOAL_ERR_NO_MEMORY;
    }

    /* One record per physical device: its PCI device is the key, so that
     * cuda0 and nvml0, or mlx5_0 and ib0, land in the same record. */
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo->hw, o));) {
        if (!o->name)
            continue; /* a hand-written file may leave it out */
        hwloc_obj_t pci = topo_pci_parent(o);
        hwloc_obj_t key = pci ? pci : o;
        if (topo_osdev_is_gpu(o)) {
            int i = topo_record(topo->gpu_objs, &topo->ngpus, key);
            shoal_topo_gpu_t *g = &topo->gpus[i];
            topo_add_gpu_name(g, o->name);
        } else if (topo_osdev_is_nic(o)) {
            int i = topo_record(topo->nic_objs, &topo->nnics, key);
            shoal_topo_nic_t *n = &topo->nics[i];
            int verbs = o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
            n->has_verbs |= verbs;
            /* The verbs device first: it is what the RDMA transport opens. */
            topo_insert_name(n->names, &n->nnames, verbs ? 0 : n->nnames, o->name);
        }
    }
    /* Sort the GPUs by the number they are known by (insertion sort: a
     * host has a handful), moving the objects along. */
    for (int i = 1; i < topo->ngpus; i++) {
        shoal_topo_gpu_t g = topo->gpus[i];
        hwloc_obj_t obj = topo->gpu_objs[i];
        int j = i;
        for (; j > 0 && topo_gpu_key(&topo->gpus[j - 1]) > topo_gpu_key(&g); j--) {
            topo->gpus[j] = topo->gpus[j - 1];
            topo->gpu_objs[j] = topo->gpu_objs[j - 1];
        }
        topo->gpus[j] = g;
        topo->gpu_objs[j] = obj;
    }
    for (int i = 0; i < topo->ngpus; i++) {
        shoal_topo_gpu_t *g = &topo->gpus[i];
        hwloc_obj_t obj = topo->gpu_objs[i];
        g->index = i;
        g->numa = shoal_topo_obj_numa(topo, obj);
        if (obj->type == HWLOC_OBJ_PCI_DEVICE) {
            topo_busid(&obj->attr->pcidev, g->busid);
            topo_fill_chain(g, obj);
        }
    }
    for (int i = 0; i < topo->nnics; i++) {
        shoal_topo_nic_t *n = &topo->nics[i];
        hwloc_obj_t obj = topo->nic_objs[i];
        n->index = i;
        n->numa = shoal_topo_obj_numa(topo, obj);
        if (obj->type == HWLOC_OBJ_PCI_DEVICE)
            topo_busid(&obj->attr->pcidev, n->busid);
    }
    return SHOAL_OK;
}

static int topo_count(hwloc_topology_t hw, hwloc_obj_type_t type)
{
    int n = hwloc_get_nbobjs_by_type(hw, type);
    return n < 0 ? 0 : n;
}

/* The binding of this process on the live machine; elsewhere, or when the
 * system does not tell, the whole machine. */
static shoal_status_t topo_find_binding(shoal_topo_t *topo)
{
    topo->binding = hwloc_bitmap_dup(hwloc_topology_get_topology_cpuset(topo->hw));
    hwloc_nodeset_t nodes = hwloc_bitmap_alloc();
    if (!topo->binding || !nodes) {
        hwloc_bitmap_free(nodes);
        shoal_error(TOPO, "cannot allocate the binding bitmaps");
        return SHOAL_ERR_NO_MEMORY;
    }
    if (topo->live && hwloc_get_cpubind(topo->hw, topo->binding, HWLOC_CPUBIND_PROCESS) != 0) {
        shoal_debug(TOPO, "cannot read this process's binding (%s); using the whole machine",
                    strerror(errno));
        hwloc_bitmap_copy(topo->binding, hwloc_topology_get_topology_cpuset(topo->hw));
    }
    const char *cpus = shoal_config_get()->topo.cpus;
    if (!topo->live && cpus[0]) {
        /* A stand-in machine: the binding SHOAL_TOPO_CPUS gives, so tests
         * can place ranks on its NUMA nodes. */
        hwloc_bitmap_t want = hwloc_bitmap_alloc();
        if (want && hwloc_bitmap_list_sscanf(want, cpus) == 0)
            hwloc_bitmap_and(want, want, hwloc_topology_get_topology_cpuset(topo->hw));
        if (want && !hwloc_bitmap_iszero(want))
            hwloc_bitmap_copy(topo->binding, want);
        else
            shoal_warn(TOPO, "SHOAL_TOPO_CPUS=%s names no PU of the %s; using all of it", cpus,
                       topo->source);
        hwloc_bitmap_free(want);
    }
    hwloc_cpuset_to_nodeset(topo->hw, topo->binding, nodes);
    topo->binding_numa = -1;
    if (hwloc_bitmap_weight(nodes) == 1) {
        hwloc_obj_t node =
            hwloc_get_numanode_obj_by_os_index(topo->hw, (unsigned)hwloc_bitmap_first(nodes));
        if (node)
            topo->binding_numa = (int)node->logical_index;
    }
    hwloc_bitmap_free(nodes);
    return SHOAL_OK;
}

static shoal_status_t topo_load_from(topo_from_t from, const char *what, shoal_topo_t **topo_p)
{
    shoal_status_t s;
    if (!topo_p || (from != TOPO_FROM_LIVE && !what)) {
        shoal_error(TOPO, "shoal_topo_load: NULL %s", topo_p ? "file name or description"
                                                            : "output pointer");
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_topo_t *topo = calloc(1, sizeof(*topo));
    if (!topo) {
        shoal_error(TOPO, "cannot allocate a topology");
        return SHOAL_ERR_NO_MEMORY;
    }
    if (hwloc_topology_init(&topo->hw) != 0) {
        shoal_error(TOPO, "hwloc_topology_init failed: %s", strerror(errno));
        s = SHOAL_ERR_NO_MEMORY;
        goto err_free_topo;
    }
    /* GPUs and NICs are I/O objects, which hwloc drops unless asked. */
    hwloc_topology_set_io_types_filter(topo->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* The OpenCL and display devices are none of them (topo_osdev_is_gpu
     * leaves OpenCL's out): their components' discovery would only start
     * the OpenCL drivers and an X client in every rank. */
    hwloc_topology_set_components(topo->hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "opencl");
    hwloc_topology_set_components(topo->hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
    switch (from) {
    case TOPO_FROM_XML:
        snprintf(topo->source, sizeof(topo->source), "file %s", what);
        if (hwloc_topology_set_xml(topo->hw, what) != 0) {
            /* hwloc reads the file here and says EINVAL for any content it
             * cannot parse. */
            shoal_error(TOPO, "cannot use hwloc XML file \"%s\": %s", what,
                        errno == EINVAL ? "not a valid hwloc XML topology" : strerror(errno));
            s = SHOAL_ERR_INVALID_ARG;
            goto err_destroy_hw;
        }
        break;
    case TOPO_FROM_SYNTHETIC:
        snprintf(topo->source, sizeof(topo->source), "synthetic %s", what);
        if (hwloc_topology_set_synthetic(topo->hw, what) != 0) {
            shoal_error(TOPO, "hwloc rejects the synthetic topology \"%s\": %s", what,
                        strerror(errno));
            s = SHOAL_ERR_INVALID_ARG;
            goto err_destroy_hw;
        }
        break;
    case TOPO_FROM_LIVE:
        snprintf(topo->source, sizeof(topo->source), "live machine");
        topo->live = 1;
        break;
    }
    if (hwloc_topology_load(topo->hw) != 0) {
        shoal_error(TOPO, "hwloc cannot load the topology of the %s: %s", topo->source,
                    strerror(errno));
        s = topo->live ? SHOAL_ERR_SYSTEM : SHOAL_ERR_INVALID_ARG;
        goto err_destroy_hw;
    }

    topo->counts.npackages = topo_count(topo->hw, HWLOC_OBJ_PACKAGE);
    topo->counts.nnuma = topo_count(topo->hw, HWLOC_OBJ_NUMANODE);
    topo->counts.ncores = topo_count(topo->hw, HWLOC_OBJ_CORE);
    topo->counts.npus = topo_count(topo->hw, HWLOC_OBJ_PU);
    topo->counts.nl3 = topo_count(topo->hw, HWLOC_OBJ_L3CACHE);
    topo->counts.nl2 = topo_count(topo->hw, HWLOC_OBJ_L2CACHE);

    s = topo_find_devices(topo);
    if (s != SHOAL_OK)
        goto err_free_lists;
    s = topo_find_binding(topo);
    if (s != SHOAL_OK)
        goto err_free_lists;
    s = shoal_topo_build_distances(topo);
    if (s != SHOAL_OK)
        goto err_free_lists;
    s = shoal_topo_build_ring(topo);
    if (s != SHOAL_OK)
        goto err_free_lists;
    shoal_debug(TOPO, "%s: %d packages, %d NUMA nodes, %d cores, %d GPUs, %d NICs",
                topo->source, topo->counts.npackages, topo->counts.nnuma,
                topo->counts.ncores, topo->ngpus, topo->nnics);
    *topo_p = topo;
    return SHOAL_OK;

err_free_lists:
    /* Everything is allocated or still NULL (calloc) by now. */
    shoal_topo_destroy(topo);
    return s;
err_destroy_hw:
    hwloc_topology_destroy(topo->hw);
err_free_topo:
    free(topo);
    return s;
}

shoal_status_t shoal_topo_load_xml(const char *path, shoal_topo_t **topo_p)
{
    return topo_load_from(TOPO_FROM_XML, path, topo_p);
}

shoal_status_t shoal_topo_load_synthetic(const char *desc, shoal_topo_t **topo_p)
{
    return topo_load_from(TOPO_FROM_SYNTHETIC, desc, topo_p);
}

shoal_status_t shoal_topo_load(shoal_topo_t **topo_p)
{
    const shoal_topo_config_t *cfg = &shoal_config_get()->topo;
    if (cfg->file[0] && cfg->synthetic[0]) {
        shoal_error(TOPO, "SHOAL_TOPO_FILE=\"%s\" and SHOAL_TOPO_SYNTHETIC=\"%s\" are both set; "
                    "set one", cfg->file, cfg->synthetic);
        return SHOAL_ERR_INVALID_ARG;
    }
    if (cfg->file[0])
        return topo_load_from(TOPO_FROM_XML, cfg->file, topo_p);
    if (cfg->synthetic[0])
        return topo_load_from(TOPO_FROM_SYNTHETIC, cfg->synthetic, topo_p);
    return topo_load_from(TOPO_FROM_LIVE, NULL, topo_p);
}

void shoal_topo_destroy(shoal_topo_t *topo)
{
    if (!topo)
        return;
    free(topo->ring);
    free(topo->nvlink);
    free(topo->numa_dist);
    hwloc_bitmap_free(topo->binding);
    free(topo->nic_objs);
    free(topo->nics);
    free(topo->gpu_objs);
    free(topo->gpus);
    hwloc_topology_destroy(topo->hw);
    free(topo);
}

const char *shoal_topo_source(const shoal_topo_t *topo)
{
    return topo->source;
}

int shoal_topo_is_live(const shoal_topo_t *topo)
{
    return topo->live;
}

const char *shoal_topo_hostname(const shoal_topo_t *topo)
{
    const char *name = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo->hw), "HostName");
    return name ? name : "";
}

void shoal_topo_counts(const shoal_topo_t *topo, shoal_topo_counts_t *counts_p)
{
    *counts_p = topo->counts;
}

int shoal_topo_ngpus(const shoal_topo_t *topo)
{
    return topo->ngpus;
}

const shoal_topo_gpu_t *shoal_topo_gpu(const shoal_topo_t *topo, int i)
{
    return i >= 0 && i < topo->ngpus ? &topo->gpus[i] : NULL;
}

int shoal_topo_nnics(const shoal_topo_t *topo)
{
    return topo->nnics;
}

const shoal_topo_nic_t *shoal_topo_nic(const shoal_topo_t *topo, int i)
{
    return i >= 0 && i < topo->nnics ? &topo->nics[i] : NULL;
}

hwloc_const_cpuset_t shoal_topo_binding(const shoal_topo_t *topo)
{
    return topo->binding;
}

int shoal_topo_binding_numa(const shoal_topo_t *topo)
{
    return topo->binding_numa;
}
