/* NCCL's syntax for lists of device names (NCCL_SOCKET_IFNAME,
 * NCCL_IB_HCA), which shoal's settings share so that the NCCL names can
 * stand for them: a comma list of name prefixes; a leading "=" makes every
 * name exact, and a "^" before it turns the list into names to avoid
 * ("=eth0", "^docker,lo", "^=eth1", "eth,ib"). A "=" before a later name
 * makes that one exact too, so "eth,=ib0" mixes both. Where ports are
 * asked for, a name may end in ":PORT" and then names that port only
 * ("mlx5_0:1,mlx5_1"). */
#ifndef SHOAL_NAMELIST_H
#define SHOAL_NAMELIST_H

/* Whether spec selects name (port 0: names without ports, where ":" is
 * part of a name; port >= 1: name's port port). An empty spec selects
 * everything. */
int shoal_namelist_selects(const char *spec, const char *name, int port);

#endif
