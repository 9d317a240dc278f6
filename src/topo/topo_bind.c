/* Which CPU a rank is bound to where SHOAL_CPU_BIND says so (topo.h). */
#include "topo_priv.h"

#include "base/config.h"

#include <stdlib.h>

/* The PUs of set, one of each core in turn before the second of any: a
 * host's ranks are handed out in this order, so neighbours in the ring
 * (consecutive local positions) sit on different cores, and a core's
 * second hardware thread is used only once every core has a rank. Writes
 * the OS indexes into pus (room for the weight of set); returns how many. */
static int topo_pus_spread(hwloc_topology_t hw, hwloc_const_cpuset_t set, unsigned *pus)
{
    int ncores = hwloc_get_nbobjs_inside_cpuset_by_type(hw, set, HWLOC_OBJ_CORE);
    int n = 0;
    if (ncores <= 0) {
        unsigned id;
        hwloc_bitmap_foreach_begin(id, set)
            pus[n++] = id;
        hwloc_bitmap_foreach_end();
        return n;
    }
    for (int k = 0, more = 1; more; k++) {
        more = 0;
        for (int c = 0; c < ncores; c++) {
            hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(hw, set, HWLOC_OBJ_CORE,
                                                                   (unsigned)c);
            hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(hw, core->cpuset,
                                                                 HWLOC_OBJ_PU, (unsigned)k);
            if (pu && hwloc_bitmap_isset(set, pu->os_index)) {
                pus[n++] = pu->os_index;
                more = 1;
            }
        }
    }
    return n;
}

int shoal_topo_bind_pick(const shoal_topo_t *topo, int mode, hwloc_const_cpuset_t cur, int pos,
                         int nlocal, hwloc_bitmap_t out)
{
    hwloc_const_cpuset_t all = hwloc_topology_get_allowed_cpuset(topo->hw);
    /* Bound by someone else (a launcher, taskset, the application). */
    if (mode == SHOAL_BIND_OFF || !hwloc_bitmap_isincluded(all, cur) || pos < 0 || nlocal < 1)
        return 0;
    int weight = hwloc_bitmap_weight(all);
    if (weight <= 0 || (mode == SHOAL_BIND_AUTO && nlocal <= weight))
        return 0;
    unsigned *pus = malloc((size_t)weight * sizeof(*pus));
    if (!pus)
        return -1;
    int n = topo_pus_spread(topo->hw, all, pus);
    if (n > 0)
        hwloc_bitmap_only(out, pus[pos % n]);
    free(pus);
    return n > 0;
}

int shoal_topo_bind_self(const shoal_topo_t *topo, int mode, int pos, int nlocal,
                         hwloc_bitmap_t saved, hwloc_bitmap_t now)
{
    if (!topo->live)
        return 0;
    hwloc_bitmap_t thread = hwloc_bitmap_alloc();
    if (!thread)
        return -1;
    /* A thread of the process bound alone counts as bound: the union of
     * the threads' bindings may still cover the machine. */
    int r = 0;
    if (hwloc_get_cpubind(topo->hw, saved, HWLOC_CPUBIND_PROCESS) == 0 &&
        hwloc_get_cpubind(topo->hw, thread, HWLOC_CPUBIND_THREAD) == 0) {
        hwloc_bitmap_and(thread, thread, saved);
        r = shoal_topo_bind_pick(topo, mode, thread, pos, nlocal, now);
        if (r == 1 && hwloc_set_cpubind(topo->hw, now, HWLOC_CPUBIND_PROCESS) != 0)
            r = -1;
    }
    hwloc_bitmap_free(thread);
    return r;
}

void shoal_topo_unbind_self(const shoal_topo_t *topo, hwloc_const_cpuset_t saved)
{
    if (topo->live)
        hwloc_set_cpubind(topo->hw, saved, HWLOC_CPUBIND_PROCESS);
}
