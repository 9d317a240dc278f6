/* The cluster view, and this process's place on its host. */
#include "cluster.h"
#include "topo.h"

#include "base/config.h"
#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The topology is loaded once per process: hwloc takes tens of ms to read
 * a machine, and a process may form many communicators. It is loaded again
 * only when the settings name another stand-in (tests change them). */
static pthread_mutex_t place_lock = PTHREAD_MUTEX_INITIALIZER;
static shoal_topo_t *place_topo;
/* shoal's binding of this process: the topology that set it, how many
 * communicators hold it, and the binding it replaced (under place_lock). */
static shoal_topo_t *bind_topo;
static int bind_holds;
static hwloc_bitmap_t bind_saved;
static char place_key[3 * SHOAL_CONFIG_STR_MAX + 3];
static int place_warned;

/* The topology the settings name, loaded when they changed (under
 * place_lock); NULL when none can be read. */
static shoal_topo_t *place_topo_locked(void)
{
    const shoal_topo_config_t *cfg = &shoal_config_get()->topo;
    char key[sizeof(place_key)];
    snprintf(key, sizeof(key), "%s|%s|%s", cfg->file, cfg->synthetic, cfg->cpus);
    if (place_topo && strcmp(key, place_key)) {
        if (place_topo != bind_topo) /* else shoal_place_unbind frees it */
            shoal_topo_destroy(place_topo);
        place_topo = NULL;
    }
    if (!place_topo) {
        if (shoal_topo_load(&place_topo) == SHOAL_OK) {
            memcpy(place_key, key, sizeof(place_key));
        } else if (!place_warned) {
            place_warned = 1;
            shoal_warn(TOPO, "no topology of this host: ranks are placed without NUMA nodes, "
                       "GPUs or NICs");
        }
    }
    return place_topo;
}

void shoal_place_self(shoal_place_t *place_p)
{
    place_p->numa = place_p->gpu = place_p->nic = -1;
    pthread_mutex_lock(&place_lock);
    place_topo_locked();
    if (place_topo) {
        hwloc_const_cpuset_t bind = shoal_topo_binding(place_topo);
        place_p->numa = shoal_topo_binding_numa(place_topo);
        place_p->gpu = shoal_topo_nearest_gpu_of_cpuset(place_topo, bind, NULL);
        place_p->nic = shoal_topo_nearest_nic_of_cpuset(place_topo, bind, NULL);
    }
    pthread_mutex_unlock(&place_lock);
}

int shoal_place_gpus_nvlinked(const shoal_cluster_t *c, int host)
{
    int all = 1;
    pthread_mutex_lock(&place_lock);
    place_topo_locked();
    for (int i = c->host_start[host]; all && i < c->host_start[host + 1]; i++) {
        for (int j = i + 1; all && j < c->host_start[host + 1]; j++) {
            int a = c->place[c->by_host[i]].gpu, b = c->place[c->by_host[j]].gpu;
            all = place_topo && a >= 0 && b >= 0 &&
                  (a == b || shoal_topo_nvlink_bw(place_topo, a, b) > 0);
        }
    }
    pthread_mutex_unlock(&place_lock);
    return all;
}

void shoal_place_nic_name(int nic, char *name, size_t cap)
{
    name[0] = '\0';
    pthread_mutex_lock(&place_lock);
    const shoal_topo_nic_t *n = place_topo ? shoal_topo_nic(place_topo, nic) : NULL;
    if (n && n->has_verbs && n->nnames > 0)
        snprintf(name, cap, "%s", n->names[0]);
    pthread_mutex_unlock(&place_lock);
}

int shoal_place_cpus(void)
{
    pthread_mutex_lock(&place_lock);
    shoal_topo_t *t = place_topo_locked();
    shoal_topo_counts_t c = {0};
    if (t)
        shoal_topo_counts(t, &c);
    pthread_mutex_unlock(&place_lock);
    return c.npus > 0 ? c.npus : 0;
}

int shoal_place_bind(int rank, int pos, int nlocal)
{
    int mode = shoal_config_get()->topo.bind;
    if (mode == SHOAL_BIND_OFF)
        return 0;
    pthread_mutex_lock(&place_lock);
    int held = 0;
    if (bind_holds > 0) {
        held = ++bind_holds;
    } else if (place_topo_locked()) {
        hwloc_bitmap_t saved = hwloc_bitmap_alloc(), now = hwloc_bitmap_alloc();
        int r = saved && now ? shoal_topo_bind_self(place_topo, mode, pos, nlocal, saved, now)
                             : -1;
        if (r == 1) {
            char *text = NULL;
            hwloc_bitmap_list_asprintf(&text, now);
            shoal_info(TOPO, "rank %d: local rank %d of %d on this host, bound to CPU %s "
                       "(SHOAL_CPU_BIND=off leaves ranks where they are)", rank, pos, nlocal,
                       text ? text : "?");
            free(text);
            bind_saved = saved;
            bind_topo = place_topo;
            saved = NULL;
            held = bind_holds = 1;
        } else if (r < 0) {
            shoal_warn(TOPO, "rank %d: cannot read or set this process's CPU binding; "
                       "left as it is", rank);
        }
        hwloc_bitmap_free(saved);
        hwloc_bitmap_free(now);
    }
    pthread_mutex_unlock(&place_lock);
    return held > 0;
}

void shoal_place_unbind(void)
{
    pthread_mutex_lock(&place_lock);
    if (bind_holds > 0 && --bind_holds == 0) {
        shoal_topo_unbind_self(bind_topo, bind_saved);
        if (bind_topo != place_topo)
            shoal_topo_destroy(bind_topo);
        hwloc_bitmap_free(bind_saved);
        bind_saved = NULL;
        bind_topo = NULL;
    }
    pthread_mutex_unlock(&place_lock);
}

/* Whether rank a goes before rank b on their host: NUMA node (unknown
 * last), then rank. */
static int local_before(const shoal_place_t *places, int a, int b)
{
    unsigned na = (unsigned)places[a].numa, nb = (unsigned)places[b].numa;
    return na != nb ? na < nb : a < b;
}

/* Insertion sort: a host's list is short and nearly sorted already. */
static void sort_local(int *ranks, int n, const shoal_place_t *places)
{
    for (int i = 1; i < n; i++) {
        int r = ranks[i], j = i;
        for (; j > 0 && local_before(places, r, ranks[j - 1]); j--)
            ranks[j] = ranks[j - 1];
        ranks[j] = r;
    }
}

shoal_status_t shoal_cluster_build(shoal_cluster_t *c, int nranks, const int *host_of,
                                   int nhosts, const shoal_place_t *places)
{
    memset(c, 0, sizeof(*c));
    c->nranks = nranks;
    c->nhosts = nhosts;
    c->host_of = host_of;
    c->place = malloc((size_t)nranks * sizeof(*c->place));
    c->host_start = calloc((size_t)nhosts + 1, sizeof(*c->host_start));
    c->by_host = malloc((size_t)nranks * sizeof(*c->by_host));
    c->local_of = malloc((size_t)nranks * sizeof(*c->local_of));
    c->ring_pos = malloc((size_t)nranks * sizeof(*c->ring_pos));
    if (!c->place || !c->host_start || !c->by_host || !c->local_of || !c->ring_pos) {
        shoal_cluster_free(c);
        shoal_error(TOPO, "no memory for the cluster view of %d ranks", nranks);
        return SHOAL_ERR_NO_MEMORY;
    }
    memcpy(c->place, places, (size_t)nranks * sizeof(*c->place));
    /* Counting sort by host, then each host's ranks by place. */
    for (int r = 0; r < nranks; r++)
        c->host_start[host_of[r] + 1]++;
    for (int h = 0; h < nhosts; h++)
        c->host_start[h + 1] += c->host_start[h];
    int *fill = c->local_of; /* used as the fill cursors, overwritten below */
    for (int h = 0; h < nhosts; h++)
        fill[h] = c->host_start[h];
    for (int r = 0; r < nranks; r++)
        c->by_host[fill[host_of[r]]++] = r;
    for (int h = 0; h < nhosts; h++)
        sort_local(c->by_host + c->host_start[h], shoal_cluster_nlocal(c, h), c->place);
    c->min_local = nranks;
    for (int h = 0; h < nhosts; h++) {
        int nl = shoal_cluster_nlocal(c, h);
        c->min_local = nl < c->min_local ? nl : c->min_local;
        c->max_local = nl > c->max_local ? nl : c->max_local;
        for (int j = 0; j < nl; j++) {
            int r = shoal_cluster_rank_at(c, h, j);
            c->local_of[r] = j;
            c->ring_pos[r] = c->host_start[h] + j;
            if (c->place[r].numa != c->place[shoal_cluster_rank_at(c, h, 0)].numa)
                c->cross_numa = 1;
        }
    }
    c->rail_ranks = malloc((size_t)c->max_local * (size_t)nhosts * sizeof(int));
    c->rail_start = calloc((size_t)c->max_local + 1, sizeof(int));
    c->rail_mod_ranks = malloc((size_t)c->max_local * (size_t)nhosts * sizeof(int));
    if (!c->rail_ranks || !c->rail_start || !c->rail_mod_ranks) {
        shoal_cluster_free(c);
        shoal_error(TOPO, "no memory for the rails of %d ranks", nranks);
        return SHOAL_ERR_NO_MEMORY;
    }
    for (int j = 0; j < c->max_local; j++) {
        int with = 0;
        for (int h = 0; h < nhosts; h++) {
            c->rail_ranks[j * nhosts + h] =
                shoal_cluster_rank_at(c, h, shoal_cluster_rail_owner(c, h, j));
            c->rail_mod_ranks[j * nhosts + h] =
                shoal_cluster_rank_at(c, h, j % shoal_cluster_nlocal(c, h));
            with += j < shoal_cluster_nlocal(c, h);
        }
        c->rail_start[j + 1] = c->rail_start[j] + with;
    }
    return SHOAL_OK;
}

void shoal_cluster_free(shoal_cluster_t *c)
{
    free(c->place);
    free(c->host_start);
    free(c->by_host);
    free(c->local_of);
    free(c->ring_pos);
    free(c->rail_ranks);
    free(c->rail_start);
    free(c->rail_mod_ranks);
    memset(c, 0, sizeof(*c));
}

void shoal_cluster_owned_rails(const shoal_cluster_t *c, int h, int j, int *first_p,
                               int *end_p)
{
    /* The smallest rail k with owner(k) >= j is ceil(j * max_local / nlocal). */
    long nl = shoal_cluster_nlocal(c, h), m = c->max_local;
    *first_p = (int)((j * m + nl - 1) / nl);
    *end_p = (int)(((j + 1) * m + nl - 1) / nl);
}

int shoal_cluster_stage_off(const shoal_cluster_t *c, int h, int j)
{
    if (j >= c->max_local)
        return c->rail_start[c->max_local];
    int nl = shoal_cluster_nlocal(c, h), q = j % nl, off = 0;
    for (int k = 0; k < c->max_local; k++) {
        if (k % nl < q || (k % nl == q && k < j))
            off += shoal_cluster_rail_size(c, k);
    }
    return off;
}

void shoal_cluster_print(const shoal_cluster_t *c, const char *const *host_names, FILE *out)
{
    fprintf(out, "cluster: %d ranks on %d host(s), %d to %d per host%s\n", c->nranks,
            c->nhosts, c->min_local, c->max_local,
            c->cross_numa ? ", some hosts span NUMA nodes" : "");
    for (int h = 0; h < c->nhosts; h++) {
        fprintf(out, "  host %d%s%s: %d rank(s)\n", h, host_names ? " " : "",
                host_names ? host_names[h] : "", shoal_cluster_nlocal(c, h));
        for (int j = 0; j < shoal_cluster_nlocal(c, h); j++) {
            int r = shoal_cluster_rank_at(c, h, j);
            const shoal_place_t *p = &c->place[r];
            fprintf(out, "    local %d: rank %d, NUMA %d, nearest GPU %d, nearest NIC %d\n", j, r,
                    p->numa, p->gpu, p->nic);
        }
    }
    fprintf(out, "rails (one rank per host; all-reduce owners):\n");
    for (int j = 0; j < c->max_local; j++) {
        fprintf(out, "  rail %d:", j);
        for (int h = 0; h < c->nhosts; h++)
            fprintf(out, " %d", c->rail_ranks[j * c->nhosts + h]);
        fprintf(out, "\n");
    }
    fprintf(out, "ring order:");
    for (int i = 0; i < c->nranks; i++)
        fprintf(out, " %d", c->by_host[i]);
    fprintf(out, "\n");
}
