/* What shoal sees, printed for tools (introspect.h). The tools stay on the
 * public API and this header; the internals they print stay here. */
#include "introspect.h"

#include "comm.h"

#include "algos/algo.h"
#include "base/config.h"
#include "base/sock.h"
#include "topo/links.h"
#include "topo/topo.h"
#include "transport/ib_dev.h"
#include "transport/transport.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>

/* Whether two addresses name the same host address (ports ignored). */
static int same_addr(const struct sockaddr *a, const shoal_sockaddr_t *b)
{
    if (a->sa_family != b->u.sa.sa_family)
        return 0;
    if (a->sa_family == AF_INET)
        return !memcmp(&((const struct sockaddr_in *)(const void *)a)->sin_addr,
                       &b->u.sin.sin_addr, sizeof(b->u.sin.sin_addr));
    if (a->sa_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                       &b->u.sin6.sin6_addr, sizeof(b->u.sin6.sin6_addr));
    return 0;
}

/* The interface that holds addr, for the reader: shoal itself only needs
 * the address. */
static void ifname_of(const shoal_sockaddr_t *addr, char name[IF_NAMESIZE + 1])
{
    struct ifaddrs *list;
    snprintf(name, IF_NAMESIZE + 1, "?");
    if (getifaddrs(&list) != 0)
        return;
    for (struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr && same_addr(ifa->ifa_addr, addr)) {
            snprintf(name, IF_NAMESIZE + 1, "%s", ifa->ifa_name);
            break;
        }
    }
    freeifaddrs(list);
}

void shoal_introspect_network(FILE *out)
{
    shoal_sockaddr_t addr;
    shoal_status_t s = shoal_sock_pick_addr(&addr);
    const char *ifname = shoal_config_get()->boot.socket_ifname;
    if (s != SHOAL_OK) {
        fprintf(out, "  interface: none found (%s)%s%s\n", shoal_status_string(s),
               ifname[0] ? "; SHOAL_SOCKET_IFNAME=" : "", ifname);
        return;
    }
    char name[IF_NAMESIZE + 1];
    char text[SHOAL_SOCKADDR_STRLEN];
    ifname_of(&addr, name);
    shoal_sock_str(&addr, text);
    /* The port is picked when a socket listens; show the host part only. */
    char *colon = strrchr(text, ':');
    if (colon)
        *colon = '\0';
    fprintf(out, "  interface: %s, address %s (%s)\n", name, text,
           ifname[0] ? "chosen by SHOAL_SOCKET_IFNAME" : "default choice");
}

void shoal_introspect_transports(FILE *out)
{
    const shoal_config_t *cfg = shoal_config_get();
    const struct {
        const shoal_transport_ops_t *ops;
        int enabled;
        const char *setting;
    } list[] = {
        {&shoal_shm_ops, cfg->shm.enable, "SHOAL_SHM_ENABLE"},
        {&shoal_ib_ops, cfg->ib.enable, "SHOAL_IB_ENABLE"},
        {&shoal_tcp_ops, cfg->tcp.enable, "SHOAL_TCP_ENABLE"},
    };
    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++)
        fprintf(out, "  %-8s %s (%s)\n", list[i].ops->name, list[i].enabled ? "enabled" : "disabled",
               list[i].setting);
    /* The RDMA ports ib may use; a rank takes the one on the NIC nearest
     * it (shoal_info -T -C shows each rank's). */
    shoal_ib_list_t ib;
    fprintf(out, "  ib's RDMA ports (SHOAL_IB_HCA, SHOAL_IB_GID_INDEX):\n");
    if (shoal_ib_ports_find(&ib) == SHOAL_OK) {
        shoal_ib_ports_print(&ib, out);
        shoal_ib_ports_free(&ib);
    } else {
        fprintf(out, "    out of memory\n");
    }
}

void shoal_introspect_algos(FILE *out)
{
    for (int k = 0; k < SHOAL_COLL_KIND_COUNT; k++) {
        fprintf(out, "  %-14s", shoal_coll_kind_name((shoal_coll_kind_t)k));
        const shoal_algo_ops_t *a;
        for (int i = 0; (a = shoal_algo_at((shoal_coll_kind_t)k, i)); i++)
            fprintf(out, " %s", a->name);
        fputc('\n', out);
    }
}

shoal_status_t shoal_introspect_topo(FILE *out)
{
    shoal_topo_t *topo;
    shoal_status_t s = shoal_topo_load(&topo);
    if (s != SHOAL_OK)
        return s;
    shoal_topo_print(topo, out);
    shoal_topo_destroy(topo);
    shoal_links_t links;
    shoal_links_defaults(&links);
    s = shoal_links_parse(shoal_config_get()->topo.links, &links);
    if (s != SHOAL_OK)
        return s;
    shoal_links_print(&links, out);
    return SHOAL_OK;
}

void shoal_introspect_cluster(shoal_comm_t comm, FILE *out)
{
    const shoal_cluster_t *c = &comm->team.cluster;
    const char **names = calloc((size_t)c->nhosts, sizeof(*names));
    for (int r = 0; names && r < comm->team.nranks; r++)
        names[comm->host_of[r]] = names[comm->host_of[r]] ? names[comm->host_of[r]]
                                                           : comm->host_ids[r];
    shoal_cluster_print(c, names, out);
    shoal_links_print(&comm->team.cost.links, out);
    if (comm->rdma_devs) {
        fprintf(out, "RDMA device of each rank (\"-\": none, tcp between hosts):\n");
        for (int r = 0; r < comm->team.nranks; r++)
            fprintf(out, "  rank %d: %s\n", r, comm->rdma_devs[r][0] ? comm->rdma_devs[r] : "-");
    }
    free(names);
}

void shoal_introspect_waits(shoal_comm_t comm, FILE *out)
{
    const shoal_team_t *t = &comm->team;
    size_t n = 2 * (size_t)t->nranks;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += atomic_load_explicit(&t->waited_ns[i], memory_order_relaxed);
    fprintf(out, "# waits of rank %d: %llu, %.3f ms in all; for data from", t->rank,
            (unsigned long long)atomic_load_explicit(&t->waited_ns[n], memory_order_relaxed),
            (double)total * 1e-6);
    for (int dir = 0; dir < 2; dir++) {
        if (dir)
            fprintf(out, "; for room at");
        for (int q = 0; q < t->nranks; q++) {
            uint64_t w = atomic_load_explicit(&t->waited_ns[2 * (size_t)q + (size_t)dir],
                                              memory_order_relaxed);
            if (w)
                fprintf(out, " %d:%.3f", q, (double)w * 1e-6);
        }
    }
    fprintf(out, " (ms)\n");
}

void shoal_introspect_settings(FILE *out)
{
    shoal_config_print(out);
}

void shoal_introspect_host(FILE *out)
{
    char host[SHOAL_HOST_ID_MAX];
    shoal_host_id(host);
    fprintf(out, "  id: %s\n", host);
}
