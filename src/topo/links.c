/* Link classes: built-in figures, the SHOAL_TOPO_LINKS override and the
 * class of a pair of ranks. Measuring the classes takes transfers, which
 * belong to the layers above: core/link_probe.c runs the probe and hands
 * its figures down in a shoal_links_t. */
#include "links.h"

#include "base/config.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

/* Typical figures of one stream: shared memory at memory-copy speed, a
 * remote NUMA node slower, NVLink and PCIe peers, an RDMA NIC and a
 * kernel TCP socket over a 10 Gbit NIC. */
static const shoal_link_cost_t link_defaults[SHOAL_LINK_CLASS_COUNT] = {
    [SHOAL_LINK_SHM_SAME_NUMA] = {0.5e-6, 10e9},
    [SHOAL_LINK_SHM_CROSS_NUMA] = {1.0e-6, 6e9},
    [SHOAL_LINK_GPU_NVLINK] = {2.0e-6, 100e9},
    [SHOAL_LINK_GPU_PCIE] = {4.0e-6, 12e9},
    [SHOAL_LINK_RDMA] = {3.0e-6, 12e9},
    [SHOAL_LINK_TCP] = {30e-6, 1.2e9},
};

void shoal_links_defaults(shoal_links_t *links_p)
{
    memset(links_p, 0, sizeof(*links_p));
    memcpy(links_p->cls, link_defaults, sizeof(link_defaults));
    links_p->intra = SHOAL_LINK_SHM_SAME_NUMA;
    links_p->inter = SHOAL_LINK_TCP;
}

static int class_by_name(const char *s, size_t len)
{
    for (int c = 0; c < SHOAL_LINK_CLASS_COUNT; c++) {
        const char *name = shoal_link_class_name((shoal_link_class_t)c);
        if (strlen(name) == len && !strncmp(name, s, len))
            return c;
    }
    return -1;
}

shoal_status_t shoal_links_parse(const char *text, shoal_links_t *links_p)
{
    shoal_links_t out = *links_p;
    const char *item = text;
    while (*item) {
        size_t len = strcspn(item, ",");
        char buf[96];
        if (len >= sizeof(buf))
            goto err_bad;
        memcpy(buf, item, len);
        buf[len] = '\0';
        char *c1 = strchr(buf, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            goto err_bad;
        *c1 = *c2 = '\0';
        int cls = class_by_name(buf, strlen(buf));
        uint64_t lat_ns;
        size_t bw;
        if (cls < 0 || shoal_config_parse_time_ns(c1 + 1, &lat_ns) != 0 ||
            shoal_config_parse_size(c2 + 1, &bw) != 0 || bw == 0)
            goto err_bad;
        out.cls[cls].lat_s = (double)lat_ns * 1e-9;
        out.cls[cls].bw_Bps = (double)bw;
        item += len;
        if (*item == ',')
            item++;
    }
    *links_p = out;
    return SHOAL_OK;

err_bad:
    shoal_error(TOPO, "SHOAL_TOPO_LINKS=%s: cannot read \"%.*s\" as class:latency:bandwidth "
                "(classes: shm, shm-xnuma, nvlink, pcie, rdma, tcp; e.g. tcp:50us:1G)", text,
                (int)strcspn(item, ","), item);
    return SHOAL_ERR_INVALID_ARG;
}

shoal_link_class_t shoal_links_class(const shoal_links_t *l, const shoal_cluster_t *c, int a,
                                     int b)
{
    if (c->host_of[a] == c->host_of[b]) {
        int na = c->place[a].numa, nb = c->place[b].numa;
        return na >= 0 && nb >= 0 && na != nb ? SHOAL_LINK_SHM_CROSS_NUMA
                                              : SHOAL_LINK_SHM_SAME_NUMA;
    }
    return l->inter;
}

void shoal_links_print(const shoal_links_t *links, FILE *out)
{
    fprintf(out, "link classes (latency, bandwidth of one stream):\n");
    for (int c = 0; c < SHOAL_LINK_CLASS_COUNT; c++)
        fprintf(out, "  %-10s %8.2f us %8.2f GB/s%s%s\n",
                shoal_link_class_name((shoal_link_class_t)c), links->cls[c].lat_s * 1e6,
                links->cls[c].bw_Bps / 1e9, links->measured[c] ? " (measured)" : "",
                c == (int)links->intra ? " <- inside a host" :
                c == (int)links->inter ? " <- between hosts" : "");
}
