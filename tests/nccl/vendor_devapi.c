/* The host halves of NCCL's device API, which the vendor's libnccl.so.2
 * exports beside nccl.h's functions (declared by the toolkit's
 * nccl_device headers, which are C++ for nvcc: their C declarations are
 * written here, with the same types). The program links them from the
 * vendor's library with -z now, so it would not even load on a drop-in
 * that lacks one; vendor_test.c's symbol case proves they land in the
 * drop-in.
 *
 * On the ranks of a forked job, on one host or on two (SHOAL_HOST_ID, the
 * drop-in's setting, as rank x 2 / nranks):
 * - the teams are NCCL's arithmetic on the communicator: world (every
 *   rank, stride 1); lsa, the ranks this one reaches by load and store
 *   (the drop-in's: those of its host, when every host holds the same
 *   number of ranks in consecutive order, else this rank alone); rail,
 *   lsa's outer factor; and their rank conversions;
 * - ncclLLA2ACalcSlots is its formula (8-byte slots per element);
 * - ncclDevCommCreate, ncclDevCommDestroy and the requirement builders
 *   return ncclInvalidUsage, the last error naming the device API, and
 *   the communicator still works;
 * - ncclResetDebugInitInternal returns. */
#include "vendor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int nRanks, rank, stride;
} vt_team_t;

ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void *reqs, void *out_dev_comm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void *dev_comm);
vt_team_t ncclTeamWorld(ncclComm_t comm);
vt_team_t ncclTeamLsa(ncclComm_t comm);
vt_team_t ncclTeamRail(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, vt_team_t team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, vt_team_t team, int rank);
ncclResult_t ncclLsaBarrierCreateRequirement(vt_team_t team, int nbarriers, void *handle,
                                             void *req);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, vt_team_t team, int nbarriers,
                                             void *handle, void *req);
int ncclLLA2ACalcSlots(int max_elts, int max_elt_size);
ncclResult_t ncclLLA2ACreateRequirement(int nblocks, int nslots, void *handle, void *req);
void ncclResetDebugInitInternal(void);

#define VT_DEVAPI_FUNCS(X)                                                               \
    X(ncclDevCommCreate) X(ncclDevCommDestroy) X(ncclTeamWorld) X(ncclTeamLsa)          \
    X(ncclTeamRail) X(ncclTeamRankToWorld) X(ncclTeamRankToLsa)                          \
    X(ncclLsaBarrierCreateRequirement) X(ncclGinBarrierCreateRequirement)                \
    X(ncclLLA2ACalcSlots) X(ncclLLA2ACreateRequirement) X(ncclResetDebugInitInternal)

int vt_devapi_check_symbols(const char *lib)
{
    int bad = 0;
#define VT_DEVAPI_CHECK(f)                                                               \
    {                                                                                    \
        void (*fn)(void) = (void (*)(void))f;                                            \
        void *p;                                                                         \
        memcpy(&p, &fn, sizeof(p));                                                      \
        bad += !vt_lives_in(#f, p, lib);                                                 \
    }
    VT_DEVAPI_FUNCS(VT_DEVAPI_CHECK)
#undef VT_DEVAPI_CHECK
    return bad;
}

static bool team_is(const char *what, vt_team_t t, int n, int rank, int stride)
{
    if (t.nRanks == n && t.rank == rank && t.stride == stride)
        return true;
    vt_fail("%s: {nRanks %d, rank %d, stride %d}, expected {%d, %d, %d}", what, t.nRanks,
            t.rank, t.stride, n, rank, stride);
    return false;
}

static bool refused(const char *what, ncclResult_t rc, ncclComm_t comm)
{
    if (!vt_rc(what, rc, ncclInvalidUsage))
        return false;
    const char *why = ncclGetLastError(comm);
    if (why && strstr(why, "device API"))
        return true;
    vt_fail("%s: last error \"%s\" does not name the device API", what, why ? why : "(null)");
    return false;
}

/* The teams on hosts of hosts ranks each (0: the layout is not even, so
 * lsa is this rank alone). */
static void check_teams(ncclComm_t comm, int rank, int nranks, int per_host)
{
    int lsa_n = per_host ? per_host : 1, lsa_rank = per_host ? rank % per_host : 0;
    team_is("ncclTeamWorld", ncclTeamWorld(comm), nranks, rank, 1);
    vt_team_t lsa = ncclTeamLsa(comm);
    team_is("ncclTeamLsa", lsa, lsa_n, lsa_rank, 1);
    vt_team_t rail = ncclTeamRail(comm);
    team_is("ncclTeamRail", rail, nranks / lsa_n, rank / lsa_n, lsa_n);
    for (int k = 0; k < lsa_n; k++) {
        int world = ncclTeamRankToWorld(comm, lsa, k);
        if (world != rank - lsa_rank + k)
            vt_fail("ncclTeamRankToWorld(lsa, %d) = %d, expected %d", k, world,
                    rank - lsa_rank + k);
    }
    for (int k = 0; k < rail.nRanks; k++) {
        int world = ncclTeamRankToWorld(comm, rail, k);
        if (world != lsa_rank + k * lsa_n)
            vt_fail("ncclTeamRankToWorld(rail, %d) = %d, expected %d", k, world,
                    lsa_rank + k * lsa_n);
    }
    vt_team_t world = ncclTeamWorld(comm);
    for (int k = rank - lsa_rank; k < rank - lsa_rank + lsa_n; k++) {
        int l = ncclTeamRankToLsa(comm, world, k);
        if (l != k - (rank - lsa_rank))
            vt_fail("ncclTeamRankToLsa(world, %d) = %d, expected %d", k, l,
                    k - (rank - lsa_rank));
    }
}

/* hosts: 1, or 2 (SHOAL_HOST_ID: the drop-in reads it once a process). */
static int devapi_rank(int rank, int nranks, const vt_ids_t *ids, int hosts)
{
    vt_set_who("rank %d", rank);
    char host[32];
    snprintf(host, sizeof(host), "vthost%d", (int)((long)rank * hosts / nranks));
    setenv("SHOAL_HOST_ID", host, 1);
    ncclComm_t comm;
    if (!VT_RC(ncclCommInitRank(&comm, nranks, ids->id[VT_ID_MAIN], rank), ncclSuccess))
        return 1;
    /* rank x 2 / nranks puts equal runs on the hosts when nranks is even. */
    check_teams(comm, rank, nranks, nranks % hosts == 0 ? nranks / hosts : 0);
    char req[256], handle[64], dev_comm[512];
    memset(req, 0, sizeof(req));
    refused("ncclDevCommCreate", ncclDevCommCreate(comm, req, dev_comm), comm);
    refused("ncclDevCommDestroy", ncclDevCommDestroy(comm, dev_comm), comm);
    refused("ncclLsaBarrierCreateRequirement",
            ncclLsaBarrierCreateRequirement(ncclTeamLsa(comm), 1, handle, req), NULL);
    refused("ncclGinBarrierCreateRequirement",
            ncclGinBarrierCreateRequirement(comm, ncclTeamRail(comm), 1, handle, req), comm);
    refused("ncclLLA2ACreateRequirement", ncclLLA2ACreateRequirement(1, 4, handle, req), NULL);
    vt_probe_allreduce(comm, rank, nranks, "after the device API's refusals", 7);
    VT_RC(ncclCommDestroy(comm), ncclSuccess);
    static const int calc[][3] = {{100, 12, 200}, {7, 8, 7}, {1, 1, 1}, {0, 16, 0}, {3, 17, 9}};
    for (size_t k = 0; k < sizeof(calc) / sizeof(calc[0]); k++) {
        int got = ncclLLA2ACalcSlots(calc[k][0], calc[k][1]);
        if (got != calc[k][2])
            vt_fail("ncclLLA2ACalcSlots(%d, %d) = %d, expected %d", calc[k][0], calc[k][1],
                    got, calc[k][2]);
    }
    ncclResetDebugInitInternal();
    return vt_failures() ? 1 : 0;
}

int vt_devapi_rank(int rank, int nranks, const vt_ids_t *ids)
{
    return devapi_rank(rank, nranks, ids, 1);
}

/* On two hosts: the drop-in reads SHOAL_HOST_ID once a process, and this
 * one's parent has read it already (its ncclGetUniqueId), so the rank
 * runs in this program started afresh (vt_devapi_exec_main). The parent's
 * id cannot serve there (its listener is the parent's), so rank 0 makes
 * one and passes it to the others through a file. */
int vt_devapi_hosts_rank(int rank, int nranks, const vt_ids_t *ids)
{
    (void)ids;
    char host[32], r[16], n[16];
    snprintf(host, sizeof(host), "vthost%d", (int)((long)rank * 2 / nranks));
    setenv("SHOAL_HOST_ID", host, 1);
    snprintf(r, sizeof(r), "%d", rank);
    snprintf(n, sizeof(n), "%d", nranks);
    execl("/proc/self/exe", "nccl_vendor_test", VT_DEVAPI_EXEC, r, n, (char *)NULL);
    vt_fail("exec /proc/self/exe: %s", strerror(errno));
    return 1;
}

/* The id of the case run under the test's process (the ranks' parent). */
static bool shared_id(int rank, ncclUniqueId *id)
{
    char path[96], tmp[104];
    snprintf(path, sizeof(path), "/tmp/shoal-vt-devapi-%d", (int)getppid());
    if (rank == 0) {
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        bool ok = VT_RC(ncclGetUniqueId(id), ncclSuccess) && f &&
                  fwrite(id, sizeof(*id), 1, f) == 1;
        if (f)
            ok &= fclose(f) == 0;
        if (!ok || rename(tmp, path) != 0) {
            vt_fail("cannot write the id to %s", path);
            return false;
        }
        return true;
    }
    for (int t = 0; t < 60000; t++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, sizeof(*id), 1, f);
            fclose(f);
            if (got == 1)
                return true;
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    vt_fail("no id from rank 0 in %s", path);
    return false;
}

int vt_devapi_exec_main(int argc, char **argv)
{
    vt_ids_t ids;
    memset(&ids, 0, sizeof(ids));
    if (argc != 4) {
        fprintf(stderr, "# usage: %s %s RANK NRANKS\n", argv[0], VT_DEVAPI_EXEC);
        return 2;
    }
    int rank = atoi(argv[2]), nranks = atoi(argv[3]);
    vt_set_who("rank %d", rank);
    if (!shared_id(rank, &ids.id[VT_ID_MAIN]))
        return 1;
    int rc = devapi_rank(rank, nranks, &ids, 2);
    if (rank == 0) {
        char path[96];
        snprintf(path, sizeof(path), "/tmp/shoal-vt-devapi-%d", (int)getppid());
        unlink(path);
    }
    return rc;
}
