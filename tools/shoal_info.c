/* shoal_info: what shoal sees on this machine, for debugging a setup.
 *   shoal_info      version, every setting, host identity, the network
 *                   address shoal would use, and the transports
 *   shoal_info -c   every setting with its default, value and documentation
 *   shoal_info -a   the algorithms of every collective (names for SHOAL_ALGO)
 *   shoal_info -T   the topology of this host (or of SHOAL_TOPO_FILE /
 *                   SHOAL_TOPO_SYNTHETIC): CPUs, binding, GPUs, NICs, distances,
 *                   and the link classes with their costs
 *   shoal_info -T -C  the same, then on every rank of a launcher's job the
 *                   cluster view of their communicator (rank 0 prints) */
#include "shoal.h"

#include "algos/algo.h"
#include "core/comm.h"
#include "base/config.h"
#include "base/sock.h"
#include "topo/links.h"
#include "topo/topo.h"
#include "transport/transport.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void shoal_info_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [-c] [-a] [-T [-C]] [-h]\n"
            "  (none)  version, settings, host identity, network address, transports\n"
            "  -c      every setting (SHOAL_*) with its default, current value and meaning\n"
            "  -a      the algorithms of every collective, for SHOAL_ALGO=coll:name,...\n"
            "  -T      the topology shoal sees: CPUs, binding, GPUs, NICs, distances\n"
            "          (SHOAL_TOPO_FILE or SHOAL_TOPO_SYNTHETIC stand in for this host),\n"
            "          link classes with latency and bandwidth (SHOAL_TOPO_LINKS)\n"
            "  -C      with -T, run as every rank of a launcher's job (SHOAL_RANK, mpirun,\n"
            "          srun, torchrun): rank 0 prints hosts, ranks, places, rails, ring\n"
            "  -h      this text\n",
            prog);
}

/* Whether two addresses name the same host address (ports ignored). */
static int shoal_info_same_addr(const struct sockaddr *a, const shoal_sockaddr_t *b)
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
static void shoal_info_ifname(const shoal_sockaddr_t *addr, char name[IF_NAMESIZE + 1])
{
    struct ifaddrs *list;
    snprintf(name, IF_NAMESIZE + 1, "?");
    if (getifaddrs(&list) != 0)
        return;
    for (struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr && shoal_info_same_addr(ifa->ifa_addr, addr)) {
            snprintf(name, IF_NAMESIZE + 1, "%s", ifa->ifa_name);
            break;
        }
    }
    freeifaddrs(list);
}

static void shoal_info_network(void)
{
    shoal_sockaddr_t addr;
    shoal_status_t s = shoal_sock_pick_addr(&addr);
    const char *ifname = shoal_config_get()->boot.socket_ifname;
    if (s != SHOAL_OK) {
        printf("  interface: none found (%s)%s%s\n", shoal_status_string(s),
               ifname[0] ? "; SHOAL_SOCKET_IFNAME=" : "", ifname);
        return;
    }
    char name[IF_NAMESIZE + 1];
    char text[SHOAL_SOCKADDR_STRLEN];
    shoal_info_ifname(&addr, name);
    shoal_sock_str(&addr, text);
    /* The port is picked when a socket listens; show the host part only. */
    char *colon = strrchr(text, ':');
    if (colon)
        *colon = '\0';
    printf("  interface: %s, address %s (%s)\n", name, text,
           ifname[0] ? "chosen by SHOAL_SOCKET_IFNAME" : "default choice");
}

static void shoal_info_transports(void)
{
    const shoal_config_t *cfg = shoal_config_get();
    const struct {
        const shoal_transport_ops_t *ops;
        int enabled;
        const char *setting;
    } list[] = {
        {&shoal_shm_ops, cfg->shm.enable, "SHOAL_SHM_ENABLE"},
        {&shoal_tcp_ops, cfg->tcp.enable, "SHOAL_TCP_ENABLE"},
    };
    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++)
        printf("  %-8s %s (%s)\n", list[i].ops->name, list[i].enabled ? "enabled" : "disabled",
               list[i].setting);
}

static void shoal_info_algos(void)
{
    for (int k = 0; k < SHOAL_COLL_KIND_COUNT; k++) {
        printf("  %-14s", shoal_coll_kind_name((shoal_coll_kind_t)k));
        const shoal_algo_ops_t *a;
        for (int i = 0; (a = shoal_algo_at((shoal_coll_kind_t)k, i)); i++)
            printf(" %s", a->name);
        printf("\n");
    }
}

/* This host's view, and the link classes the settings give. */
static int shoal_info_topo(void)
{
    shoal_topo_t *topo;
    shoal_status_t s = shoal_topo_load(&topo);
    if (s != SHOAL_OK) {
        fprintf(stderr, "shoal_info: cannot load the topology: %s\n", shoal_status_string(s));
        return 1;
    }
    shoal_topo_print(topo, stdout);
    shoal_topo_destroy(topo);
    shoal_links_t links;
    shoal_links_defaults(&links);
    if (shoal_links_parse(shoal_config_get()->topo.links, &links) != SHOAL_OK)
        return 1;
    shoal_links_print(&links, stdout);
    return 0;
}

/* The cluster view of a communicator formed from the launcher's
 * environment (every rank runs shoal_info -T -C; rank 0 prints). */
static int shoal_info_cluster(void)
{
    shoal_comm_t comm;
    shoal_status_t s = shoal_comm_init_env(&comm);
    if (s != SHOAL_OK) {
        fprintf(stderr, "shoal_info: -C needs ranks from a launcher (mpirun, srun, torchrun, "
                "SHOAL_RANK + SHOAL_SIZE): %s\n", shoal_comm_last_error(NULL));
        return 1;
    }
    if (comm->rank == 0) {
        const shoal_cluster_t *c = &comm->cluster;
        const char **names = calloc((size_t)c->nhosts, sizeof(*names));
        for (int r = 0; names && r < comm->nranks; r++)
            names[comm->host_of[r]] = names[comm->host_of[r]] ? names[comm->host_of[r]]
                                                               : comm->host_ids[r];
        shoal_cluster_print(c, names, stdout);
        shoal_links_print(&comm->links, stdout);
        free(names);
        fflush(stdout);
    }
    s = shoal_comm_destroy(comm);
    return s == SHOAL_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    int settings_only = 0, algos_only = 0, topo_only = 0, cluster = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-c")) {
            settings_only = 1;
        } else if (!strcmp(argv[a], "-a")) {
            algos_only = 1;
        } else if (!strcmp(argv[a], "-T")) {
            topo_only = 1;
        } else if (!strcmp(argv[a], "-C")) {
            cluster = 1;
        } else if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
            shoal_info_usage(stdout, argv[0]);
            return 0;
        } else {
            fprintf(stderr, "shoal_info: unknown argument \"%s\"\n", argv[a]);
            shoal_info_usage(stderr, argv[0]);
            return 2;
        }
    }
    if (topo_only && cluster)
        return shoal_info_topo() || shoal_info_cluster();
    if (topo_only)
        return shoal_info_topo();
    if (algos_only) {
        shoal_info_algos();
        return 0;
    }
    if (settings_only) {
        shoal_config_print(stdout);
        return 0;
    }

    int v = shoal_version();
    printf("shoal %d.%d.%d\n\n", v / 10000, v / 100 % 100, v % 100);
    printf("Settings:\n");
    shoal_config_print(stdout);

    char host[SHOAL_HOST_ID_MAX];
    shoal_host_id(host);
    printf("\nHost:\n  id: %s\n", host);
    printf("\nNetwork:\n");
    shoal_info_network();
    printf("\nTransports (in order of preference):\n");
    shoal_info_transports();
    printf("\nAlgorithms (SHOAL_ALGO=coll:name,...; auto picks by cost):\n");
    shoal_info_algos();
    return 0;
}
