/* Introspection for tools: the one internal header that tools/shoal_info
 * (and any other tool that reports what shoal sees) includes besides the
 * public ones. Each function prints to out and is as thread-safe as
 * shoal_config_get; none keeps a pointer to out. */
#ifndef SHOAL_INTROSPECT_H
#define SHOAL_INTROSPECT_H

#include "shoal.h"

#include <stdio.h>

/* Every setting: name, default, current value, documentation. */
void shoal_introspect_settings(FILE *out);

/* This host's identity for topology ("  id: ..."). */
void shoal_introspect_host(FILE *out);

/* The interface and address the sockets would use, and why. */
void shoal_introspect_network(FILE *out);

/* The transports in order of preference, with the setting that enables
 * each. */
void shoal_introspect_transports(FILE *out);

/* The algorithms of every collective, as SHOAL_ALGO names them. */
void shoal_introspect_algos(FILE *out);

/* This host's topology (or SHOAL_TOPO_FILE's / SHOAL_TOPO_SYNTHETIC's) and
 * the link classes the settings give. Errors: the topology does not load
 * (logged), or SHOAL_TOPO_LINKS is malformed (logged); out may then hold
 * part of the text. */
shoal_status_t shoal_introspect_topo(FILE *out);

/* The cluster view of comm (hosts, ranks, places, rails, ring) and its
 * link classes with their figures. comm is borrowed. */
void shoal_introspect_cluster(shoal_comm_t comm, FILE *out);

/* How long this rank of comm waited, since it was created, for each peer's
 * data and for room in each peer's slots, on one line. Call it between
 * operations. comm is borrowed. */
void shoal_introspect_waits(shoal_comm_t comm, FILE *out);

#endif
