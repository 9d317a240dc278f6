/* The node view of the topology: what one host holds (packages, NUMA nodes,
 * cores, GPUs, NICs) and how close its parts are, read through hwloc from
 * the live machine, a recorded hwloc XML file (SHOAL_TOPO_FILE) or a
 * synthetic description (SHOAL_TOPO_SYNTHETIC). The cluster view (which
 * ranks share a host) is built on top of this from the bootstrap exchange.
 *
 * Ownership: a shoal_topo_t comes from shoal_topo_load* and leaves through
 * shoal_topo_destroy; every pointer a query returns belongs to it and lives
 * until then. Thread-safety: a loaded topology is read-only, so any number
 * of threads may query it at once; load and destroy are not thread-safe on
 * the same object. */
#ifndef SHOAL_TOPO_H
#define SHOAL_TOPO_H

#include "shoal.h"

#include <hwloc.h>
#include <stdint.h>
#include <stdio.h>

typedef struct shoal_topo shoal_topo_t;

/* Names an OS device may carry ("cuda0", "mlx5_0"), and PCI bus ids. */
#define SHOAL_TOPO_NAME_MAX 32
#define SHOAL_TOPO_NAMES_MAX 4
#define SHOAL_TOPO_BUSID_MAX 20
/* Bridges kept in a GPU's PCI parent chain; deeper ones are cut off. */
#define SHOAL_TOPO_PCI_CHAIN_MAX 8

/* How two endpoints are joined, from the fastest kind inward to the
 * slowest across hosts. Later work adds the classes it measures. */
#define SHOAL_LINK_CLASS_LIST(X)                                              \
    X(SHOAL_LINK_SHM_SAME_NUMA, "shm")                                        \
    X(SHOAL_LINK_SHM_CROSS_NUMA, "shm-xnuma")                                 \
    X(SHOAL_LINK_GPU_NVLINK, "nvlink")                                        \
    X(SHOAL_LINK_GPU_PCIE, "pcie")                                            \
    X(SHOAL_LINK_RDMA, "rdma")                                                \
    X(SHOAL_LINK_TCP, "tcp")

typedef enum {
#define SHOAL_LINK_CLASS_ENUM_(name, text) name,
    SHOAL_LINK_CLASS_LIST(SHOAL_LINK_CLASS_ENUM_)
#undef SHOAL_LINK_CLASS_ENUM_
    SHOAL_LINK_CLASS_COUNT
} shoal_link_class_t;

typedef struct {
    int npackages;
    int nnuma;
    int ncores;
    int npus;
    int nl3;
    int nl2;
} shoal_topo_counts_t;

/* One physical GPU: its CUDA, NVML or other accelerator OS devices share
 * one PCI device and are listed together. */
typedef struct {
    int index;                                       /* position in the GPU list */
    int nnames;
    char names[SHOAL_TOPO_NAMES_MAX][SHOAL_TOPO_NAME_MAX]; /* CUDA name first, then NVML */
    char busid[SHOAL_TOPO_BUSID_MAX];                /* "0000:12:00.0", "" without PCI */
    int numa;               /* logical index of its NUMA node, -1 when not one node */
    int npci;                                        /* entries in pci_chain */
    /* The bridges above the device, nearest first, up to the host bridge
     * (written "host:DDDD:BB", its domain and secondary bus). */
    char pci_chain[SHOAL_TOPO_PCI_CHAIN_MAX][SHOAL_TOPO_BUSID_MAX];
} shoal_topo_gpu_t;

/* One physical NIC: its OpenFabrics (verbs) device and its network
 * interface, when it has both, share one PCI device. */
typedef struct {
    int index;
    int nnames;
    char names[SHOAL_TOPO_NAMES_MAX][SHOAL_TOPO_NAME_MAX]; /* OpenFabrics name first */
    int has_verbs;                                   /* an OpenFabrics device is there */
    char busid[SHOAL_TOPO_BUSID_MAX];
    int numa;
} shoal_topo_nic_t;

/* Load the topology the settings name: SHOAL_TOPO_FILE (hwloc XML), else
 * SHOAL_TOPO_SYNTHETIC, else the live machine. Returns SHOAL_OK and writes
 * *topo_p; SHOAL_ERR_INVALID_ARG for a NULL topo_p, both settings set, a
 * file that cannot be read or parsed, or a bad description;
 * SHOAL_ERR_NO_MEMORY; SHOAL_ERR_SYSTEM when hwloc cannot read the live
 * machine. On failure *topo_p is untouched and the cause is logged. */
shoal_status_t shoal_topo_load(shoal_topo_t **topo_p);

/* The same from the hwloc XML file at path, or from a synthetic description
 * ("pack:2 numa:2 core:4 pu:2"), whatever the settings say. */
shoal_status_t shoal_topo_load_xml(const char *path, shoal_topo_t **topo_p);
shoal_status_t shoal_topo_load_synthetic(const char *desc, shoal_topo_t **topo_p);

/* Frees everything; NULL is allowed. */
void shoal_topo_destroy(shoal_topo_t *topo);

/* Where it came from: "live machine", "file PATH" or "synthetic DESC". */
const char *shoal_topo_source(const shoal_topo_t *topo);
/* Whether it describes the machine this process runs on. */
int shoal_topo_is_live(const shoal_topo_t *topo);
/* The host name hwloc recorded, or "" when none (synthetic topologies). */
const char *shoal_topo_hostname(const shoal_topo_t *topo);
void shoal_topo_counts(const shoal_topo_t *topo, shoal_topo_counts_t *counts_p);

int shoal_topo_ngpus(const shoal_topo_t *topo);
/* GPU i, or NULL when i is out of range. */
const shoal_topo_gpu_t *shoal_topo_gpu(const shoal_topo_t *topo, int i);
int shoal_topo_nnics(const shoal_topo_t *topo);
const shoal_topo_nic_t *shoal_topo_nic(const shoal_topo_t *topo, int i);

/* Parent hops from GPU gpu and from NIC nic up to their common ancestor,
 * added; -1 for an index out of range. */
int shoal_topo_gpu_nic_hops(const shoal_topo_t *topo, int gpu, int nic);
/* The NIC nearest GPU gpu (fewest hops, ties to the lowest index), with
 * the hops in *hops_p when hops_p is not NULL; -1 when there is none. */
int shoal_topo_nearest_nic(const shoal_topo_t *topo, int gpu, int *hops_p);
/* The GPU nearest NIC nic, likewise. */
int shoal_topo_nearest_gpu(const shoal_topo_t *topo, int nic, int *hops_p);
/* The NIC, or GPU, nearest the CPUs of set (a rank's binding): one whose
 * CPUs intersect set wins over one whose CPUs do not, then fewest hops
 * from the smallest object that covers set, then the lowest index; -1 when
 * there is none. */
int shoal_topo_nearest_nic_of_cpuset(const shoal_topo_t *topo, hwloc_const_cpuset_t set,
                                     int *hops_p);
int shoal_topo_nearest_gpu_of_cpuset(const shoal_topo_t *topo, hwloc_const_cpuset_t set,
                                     int *hops_p);

/* The CPUs this process is bound to (live machine), or every CPU of the
 * machine (a file or a description). */
hwloc_const_cpuset_t shoal_topo_binding(const shoal_topo_t *topo);
/* The logical index of the NUMA node of the binding, -1 when it spans
 * several. */
int shoal_topo_binding_numa(const shoal_topo_t *topo);

/* Where SHOAL_CPU_BIND mode (SHOAL_BIND_AUTO...) binds the rank at local
 * position pos of the nlocal ranks of its host, whose process is bound to
 * cur now. Returns 1 with the one PU in out: the PUs the topology allows,
 * one of each core in turn before any core's second, taken in turn by
 * position, so that ranks next to each other in the ring sit on different
 * cores. Returns 0 to leave the process as it is: mode off, cur narrower
 * than the allowed PUs (someone bound it already), or, under auto, no
 * more ranks than PUs. -1 when out of memory. */
int shoal_topo_bind_pick(const shoal_topo_t *topo, int mode, hwloc_const_cpuset_t cur, int pos,
                         int nlocal, hwloc_bitmap_t out);
/* On the live machine: every thread of this process bound as
 * shoal_topo_bind_pick says, from the binding of the process and of the
 * calling thread. Returns 1 when it bound them, with the process's binding
 * before in saved and after in now; 0 when it left them (always for a
 * stand-in topology); -1 when reading or setting the binding failed or
 * memory ran out. shoal_topo_unbind_self puts saved back. */
int shoal_topo_bind_self(const shoal_topo_t *topo, int mode, int pos, int nlocal,
                         hwloc_bitmap_t saved, hwloc_bitmap_t now);
void shoal_topo_unbind_self(const shoal_topo_t *topo, hwloc_const_cpuset_t saved);

/* NUMA latency from node i to node j (logical indexes) in *value_p;
 * returns 0, or -1 when the topology has no such matrix or i, j are out of
 * range. */
int shoal_topo_numa_distance(const shoal_topo_t *topo, int i, int j, uint64_t *value_p);
int shoal_topo_has_numa_distances(const shoal_topo_t *topo);

/* NVLink bandwidth from GPU i to GPU j as hwloc records it (MB/s): the
 * direct links plus, through each NVSwitch both reach, the lesser of the
 * two links. 0 when none or out of range. */
uint64_t shoal_topo_nvlink_bw(const shoal_topo_t *topo, int i, int j);
int shoal_topo_has_nvlink(const shoal_topo_t *topo);

/* GPU_NVLINK when GPUs i and j share NVLink bandwidth, else GPU_PCIE. */
shoal_link_class_t shoal_topo_gpu_link(const shoal_topo_t *topo, int i, int j);
const char *shoal_link_class_name(shoal_link_class_t cls);

/* The GPUs in ring order, neighbours close: sorted by NUMA node, then
 * PCIe switch, then bus id. order_p receives shoal_topo_ngpus() indexes. */
void shoal_topo_gpu_ring(const shoal_topo_t *topo, int *order_p);

/* The text picture shoal_info -T prints: counts, binding, GPUs, NICs,
 * distance matrices, ring order and GPU link classes. */
void shoal_topo_print(const shoal_topo_t *topo, FILE *out);

#endif
