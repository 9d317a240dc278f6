/* A communicator's link figures: what the cost model knows of the links
 * between its ranks. topo/links.h holds the classes and their built-in
 * figures; this file measures them (SHOAL_TOPO_PROBE) over the
 * communicator's own endpoints and applies the settings. */
#ifndef SHOAL_LINK_PROBE_H
#define SHOAL_LINK_PROBE_H

#include "shoal.h"

struct shoal_comm;

/* Fill comm->team.cost at init, after wireup: defaults, then the probe when
 * SHOAL_TOPO_PROBE is on (a collective call of every rank: one rank of each
 * measured pair times round trips, and a bootstrap all-gather gives every
 * rank the same figures), then SHOAL_TOPO_LINKS, then SHOAL_ALGO_LATENCY /
 * SHOAL_ALGO_BANDWIDTH for every class; and the flat model's slowest link
 * (shoal_cost_flat). Errors: a bad SHOAL_TOPO_LINKS, or the
 * probe's communication. */
shoal_status_t shoal_links_setup(struct shoal_comm *comm);

#endif
