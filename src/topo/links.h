/* Link classes and their costs: what the cost model knows of the links a
 * communicator's ranks are joined by. Every rank of a communicator holds
 * the same figures (defaults, SHOAL_TOPO_LINKS, or the probe's, which one
 * rank measures and every rank reads), so every rank picks the same
 * algorithm. */
#ifndef SHOAL_LINKS_H
#define SHOAL_LINKS_H

#include "cluster.h"
#include "topo.h"


typedef struct {
    double lat_s;   /* one small message, one way */
    double bw_Bps;  /* one stream, bytes per second */
} shoal_link_cost_t;

typedef struct {
    shoal_link_cost_t cls[SHOAL_LINK_CLASS_COUNT];
    int measured[SHOAL_LINK_CLASS_COUNT];   /* by the probe */
    shoal_link_class_t intra; /* the slowest class between ranks of one host */
    shoal_link_class_t inter; /* the class between hosts */
} shoal_links_t;

/* The built-in figures of every class. */
void shoal_links_defaults(shoal_links_t *links_p);

/* Apply "class:latency:bandwidth,..." (SHOAL_TOPO_LINKS syntax; latency as
 * SHOAL_TIMEOUT is written, bandwidth in bytes/s with the
 * binary k/M/G suffixes of sizes).
 * SHOAL_ERR_INVALID_ARG with a logged reason for malformed text; links_p
 * is then unchanged. */
shoal_status_t shoal_links_parse(const char *text, shoal_links_t *links_p);

/* The class between ranks a and b of a cluster view: l->inter between
 * hosts. */
shoal_link_class_t shoal_links_class(const shoal_links_t *l, const shoal_cluster_t *c, int a,
                                     int b);

/* Print the classes with their figures (shoal_info -T). */
void shoal_links_print(const shoal_links_t *links, FILE *out);

#endif
