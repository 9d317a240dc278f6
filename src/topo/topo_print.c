/* The text picture of a topology for shoal_info -T, built from the public
 * queries only, so that it shows exactly what the rest of shoal sees. */
#include "topo.h"

#include <stdlib.h>

static void topo_print_numa(FILE *out, int numa)
{
    if (numa < 0)
        fprintf(out, "NUMA -");
    else
        fprintf(out, "NUMA %d", numa);
}

static void topo_print_names(FILE *out, const char (*names)[SHOAL_TOPO_NAME_MAX], int n)
{
    for (int k = 0; k < n; k++)
        fprintf(out, "%s%s", k ? "/" : "", names[k]);
}

static void topo_print_gpus(const shoal_topo_t *topo, FILE *out)
{
    int ng = shoal_topo_ngpus(topo);
    fprintf(out, "GPUs: %d\n", ng);
    for (int g = 0; g < ng; g++) {
        const shoal_topo_gpu_t *gpu = shoal_topo_gpu(topo, g);
        fprintf(out, "  GPU %d ", gpu->index);
        topo_print_names(out, gpu->names, gpu->nnames);
        fprintf(out, " bus %s ", gpu->busid[0] ? gpu->busid : "-");
        topo_print_numa(out, gpu->numa);
        int hops = 0;
        int nic = shoal_topo_nearest_nic(topo, g, &hops);
        if (nic >= 0)
            fprintf(out, " nearest NIC %d (%s, %d hops)", nic, shoal_topo_nic(topo, nic)->names[0],
                    hops);
        else
            fprintf(out, " nearest NIC -");
        fprintf(out, "\n      PCI path:");
        for (int k = 0; k < gpu->npci; k++)
            fprintf(out, " %s", gpu->pci_chain[k]);
        fprintf(out, "%s\n", gpu->npci ? "" : " -");
    }
}

static void topo_print_nics(const shoal_topo_t *topo, FILE *out)
{
    int nn = shoal_topo_nnics(topo);
    fprintf(out, "NICs: %d\n", nn);
    for (int n = 0; n < nn; n++) {
        const shoal_topo_nic_t *nic = shoal_topo_nic(topo, n);
        fprintf(out, "  NIC %d ", nic->index);
        topo_print_names(out, nic->names, nic->nnames);
        fprintf(out, " bus %s ", nic->busid[0] ? nic->busid : "-");
        topo_print_numa(out, nic->numa);
        int hops = 0;
        int gpu = shoal_topo_nearest_gpu(topo, n, &hops);
        if (gpu >= 0)
            fprintf(out, " nearest GPU %d (%d hops)\n", gpu, hops);
        else
            fprintf(out, " nearest GPU -\n");
    }
}

static void topo_print_matrices(const shoal_topo_t *topo, FILE *out)
{
    shoal_topo_counts_t c;
    shoal_topo_counts(topo, &c);
    if (shoal_topo_has_numa_distances(topo)) {
        fprintf(out, "NUMA latency (relative):\n     ");
        for (int j = 0; j < c.nnuma; j++)
            fprintf(out, " %5d", j);
        fprintf(out, "\n");
        for (int i = 0; i < c.nnuma; i++) {
            fprintf(out, "  %3d", i);
            for (int j = 0; j < c.nnuma; j++) {
                uint64_t v = 0;
                shoal_topo_numa_distance(topo, i, j, &v);
                fprintf(out, " %5llu", (unsigned long long)v);
            }
            fprintf(out, "\n");
        }
    }
    int ng = shoal_topo_ngpus(topo);
    if (shoal_topo_has_nvlink(topo)) {
        fprintf(out, "NVLink bandwidth (MB/s; through NVSwitches added):\n     ");
        for (int j = 0; j < ng; j++)
            fprintf(out, " %7d", j);
        fprintf(out, "\n");
        for (int i = 0; i < ng; i++) {
            fprintf(out, "  %3d", i);
            for (int j = 0; j < ng; j++)
                fprintf(out, " %7llu", (unsigned long long)shoal_topo_nvlink_bw(topo, i, j));
            fprintf(out, "\n");
        }
    }
}

/* The ring, then one line per GPU: the class of its link to every other
 * GPU, as the first letter of the class (n NVLink, p PCIe). */
static void topo_print_ring(const shoal_topo_t *topo, FILE *out)
{
    int ng = shoal_topo_ngpus(topo);
    if (ng == 0)
        return;
    int *ring = malloc((size_t)ng * sizeof(*ring));
    if (ring) {
        shoal_topo_gpu_ring(topo, ring);
        fprintf(out, "GPU ring:");
        for (int i = 0; i < ng; i++)
            fprintf(out, " %d", ring[i]);
        fprintf(out, "\n");
        free(ring);
    }
    fprintf(out, "GPU links (n %s, p %s):\n", shoal_link_class_name(SHOAL_LINK_GPU_NVLINK),
            shoal_link_class_name(SHOAL_LINK_GPU_PCIE));
    for (int i = 0; i < ng; i++) {
        fprintf(out, "  %3d ", i);
        for (int j = 0; j < ng; j++) {
            char ch = '.';
            if (i != j)
                ch = shoal_topo_gpu_link(topo, i, j) == SHOAL_LINK_GPU_NVLINK ? 'n' : 'p';
            fputc(ch, out);
        }
        fputc('\n', out);
    }
}

void shoal_topo_print(const shoal_topo_t *topo, FILE *out)
{
    shoal_topo_counts_t c;
    shoal_topo_counts(topo, &c);
    const char *host = shoal_topo_hostname(topo);
    fprintf(out, "Source: %s\n", shoal_topo_source(topo));
    fprintf(out, "Host name: %s\n", host[0] ? host : "(not recorded)");
    fprintf(out, "Packages: %d  NUMA nodes: %d  cores: %d  PUs: %d  L3: %d  L2: %d\n",
            c.npackages, c.nnuma, c.ncores, c.npus, c.nl3, c.nl2);

    char *set = NULL;
    hwloc_bitmap_list_asprintf(&set, shoal_topo_binding(topo));
    fprintf(out, "Binding%s: PUs %s, ",
            shoal_topo_is_live(topo) ? " of this process" : " (whole machine: not live)",
            set ? set : "?");
    free(set);
    topo_print_numa(out, shoal_topo_binding_numa(topo));
    int hops = 0;
    int nic = shoal_topo_nearest_nic_of_cpuset(topo, shoal_topo_binding(topo), &hops);
    if (nic >= 0)
        fprintf(out, ", nearest NIC %d (%d hops)", nic, hops);
    fprintf(out, "\n");

    topo_print_gpus(topo, out);
    topo_print_nics(topo, out);
    topo_print_matrices(topo, out);
    topo_print_ring(topo, out);
}
