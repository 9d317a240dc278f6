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

#include "core/introspect.h"

#include <stdio.h>
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

/* This host's view, and the link classes the settings give. */
static int shoal_info_topo(void)
{
    shoal_status_t s = shoal_introspect_topo(stdout);
    if (s != SHOAL_OK) {
        fprintf(stderr, "shoal_info: cannot show the topology: %s\n", shoal_status_string(s));
        return 1;
    }
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
    int rank = -1;
    shoal_comm_rank(comm, &rank);
    if (rank == 0) {
        shoal_introspect_cluster(comm, stdout);
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
        shoal_introspect_algos(stdout);
        return 0;
    }
    if (settings_only) {
        shoal_introspect_settings(stdout);
        return 0;
    }

    int v = shoal_version();
    printf("shoal %d.%d.%d\n\n", v / 10000, v / 100 % 100, v % 100);
    printf("Settings:\n");
    shoal_introspect_settings(stdout);
    printf("\nHost:\n");
    shoal_introspect_host(stdout);
    printf("\nNetwork:\n");
    shoal_introspect_network(stdout);
    printf("\nTransports (in order of preference):\n");
    shoal_introspect_transports(stdout);
    printf("\nAlgorithms (SHOAL_ALGO=coll:name,...; auto picks by cost):\n");
    shoal_introspect_algos(stdout);
    return 0;
}
