/* The host halves of NCCL's device API (the toolkit's nccl_device headers),
 * which NVIDIA's libnccl.so.2 exports beside the host API, so that a
 * program linked against them loads and resolves them on the door (also
 * under LD_BIND_NOW or a "-z now" link).
 *
 * The device API is kernels that call NCCL from the GPU (load-store and
 * GPU-initiated network access inside a device communicator). The door
 * has no device-side library: ncclDevCommCreate, ncclDevCommDestroy and
 * the requirement builders the create takes return ncclInvalidUsage with
 * a last error that says so, and what the door serves instead.
 *
 * What is plain arithmetic on the communicator is answered as NCCL
 * answers it: the teams (world: every rank, stride 1; lsa: the ranks this
 * one reaches by load and store, here those of its host, when every host
 * holds the same number of ranks in consecutive order, else this rank
 * alone; rail: the lsa team's outer factor, one rank of each such group)
 * and their rank conversions, and the slot count of the LL all-to-all. */
#include "door.h"

#include "base/dev.h"

#include <string.h>

/* The toolkit's layout (nccl_device/core.h). */
typedef struct {
    int nRanks, rank, stride;
} door_team_t;

/* The lsa team of sc: the size of each host's run of consecutive ranks
 * (1 when the hosts' runs differ or interleave) and this rank in it. */
static door_team_t lsa_of(shoal_comm_t sc)
{
    const shoal_cluster_t *cl = &sc->team.cluster;
    int n = sc->team.nranks, me = sc->team.rank;
    int size = cl->nhosts > 0 && n % cl->nhosts == 0 ? n / cl->nhosts : 1;
    for (int r = 0; r < n && size > 1; r++) {
        if (cl->host_of[r] != cl->host_of[r - r % size])
            size = 1;
    }
    return (door_team_t){.nRanks = size, .rank = me % size, .stride = 1};
}

/* comm's shoal communicator, or NULL (the failure recorded). */
static shoal_comm_t comm_of(ncclComm_t comm, const char *what)
{
    shoal_comm_t sc;
    return shoal_nccl_enter(comm, what, &sc) == ncclSuccess ? sc : NULL;
}

static ncclResult_t unsupported(ncclComm_t comm, const char *what)
{
    const char *cuda = shoal_dev_get() ? "the CUDA module is loaded: NCCL's host calls on "
                                         "device buffers are served, stream-ordered"
                                       : shoal_dev_why();
    return shoal_nccl_fail(comm, ncclInvalidUsage,
                           "%s: NCCL's device API (kernels that call NCCL on the GPU) needs a "
                           "device-side library, which shoal's door does not have; its host "
                           "calls serve host and device buffers instead (%s)", what, cuda);
}

NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const void *reqs, void *out)
{
    (void)reqs, (void)out;
    shoal_nccl_once();
    return unsupported(shoal_nccl_comm_valid(comm) ? comm : NULL, "ncclDevCommCreate");
}

NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const void *dev_comm)
{
    (void)dev_comm;
    shoal_nccl_once();
    return unsupported(shoal_nccl_comm_valid(comm) ? comm : NULL, "ncclDevCommDestroy");
}

NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, door_team_t team, int nbarriers,
         void *handle, void *req)
{
    (void)team, (void)nbarriers, (void)handle, (void)req;
    shoal_nccl_once();
    return unsupported(NULL, "ncclLsaBarrierCreateRequirement");
}

NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, door_team_t team,
         int nbarriers, void *handle, void *req)
{
    (void)team, (void)nbarriers, (void)handle, (void)req;
    shoal_nccl_once();
    return unsupported(shoal_nccl_comm_valid(comm) ? comm : NULL,
                       "ncclGinBarrierCreateRequirement");
}

NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int nblocks, int nslots, void *handle,
         void *req)
{
    (void)nblocks, (void)nslots, (void)handle, (void)req;
    shoal_nccl_once();
    return unsupported(NULL, "ncclLLA2ACreateRequirement");
}

/* Slots of 8 bytes for maxElts elements of maxEltSize bytes each. */
NCCL_API(int, ncclLLA2ACalcSlots, int max_elts, int max_elt_size)
{
    return max_elts * ((max_elt_size + 7) / 8);
}

NCCL_API(door_team_t, ncclTeamWorld, ncclComm_t comm)
{
    shoal_comm_t sc = comm_of(comm, "ncclTeamWorld");
    if (!sc)
        return (door_team_t){0};
    return (door_team_t){.nRanks = sc->team.nranks, .rank = sc->team.rank, .stride = 1};
}

NCCL_API(door_team_t, ncclTeamLsa, ncclComm_t comm)
{
    shoal_comm_t sc = comm_of(comm, "ncclTeamLsa");
    return sc ? lsa_of(sc) : (door_team_t){0};
}

NCCL_API(door_team_t, ncclTeamRail, ncclComm_t comm)
{
    shoal_comm_t sc = comm_of(comm, "ncclTeamRail");
    if (!sc)
        return (door_team_t){0};
    door_team_t lsa = lsa_of(sc);
    return (door_team_t){.nRanks = sc->team.nranks / lsa.nRanks,
                         .rank = sc->team.rank / lsa.nRanks, .stride = lsa.nRanks};
}

/* Rank `rank` of team, as a world rank: team's ranks lie stride apart
 * around this one. */
NCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, door_team_t team, int rank)
{
    shoal_comm_t sc = comm_of(comm, "ncclTeamRankToWorld");
    return sc ? sc->team.rank + (rank - team.rank) * team.stride : -1;
}

/* The same as a rank of this rank's lsa team. */
NCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, door_team_t team, int rank)
{
    shoal_comm_t sc = comm_of(comm, "ncclTeamRankToLsa");
    return sc ? lsa_of(sc).rank + (rank - team.rank) * team.stride : -1;
}
