/* What the schedules ask of the communicator their team belongs to:
 * core's fault watch, failure causes and mismatch reports, and the
 * registration cache (algos/team.h: shoal_team_hooks_t). */
#include "comm.h"

#include "fault.h"
#include "reg.h"
#include "rma.h"

#include <string.h>

static shoal_status_t hook_watch(shoal_team_t *team)
{
    return shoal_fault_watch(shoal_team_comm(team), 0);
}

static void hook_cause(shoal_team_t *team, const char *text)
{
    shoal_fault_cause(shoal_team_comm(team), "%s", text);
}

static shoal_status_t hook_mismatch(shoal_team_t *team, int peer, const void *hdr)
{
    shoal_sig_t sig;
    memcpy(&sig, hdr, sizeof(sig));
    return shoal_fault_mismatch(shoal_team_comm(team), peer, &sig);
}

static shoal_mem_t *hook_mem_of(shoal_team_t *team, int tl, const void *buf, size_t len)
{
    const shoal_reg_t *reg = shoal_reg_lookup(shoal_team_comm(team), buf, len);
    return reg && tl >= 0 && tl < SHOAL_REG_TL ? reg->mem[tl] : NULL;
}

_Static_assert(sizeof(shoal_sig_t) == SHOAL_TL_HDR_BYTES, "a signature fills the header");
_Static_assert(offsetof(shoal_sig_t, kind) == SHOAL_HDR_KIND_AT &&
                   SHOAL_SIG_RMA == SHOAL_HDR_KIND_RMA,
               "a one-sided message's kind sits where receives look for it");

const shoal_team_hooks_t shoal_comm_team_hooks = {
    .size = sizeof(shoal_team_hooks_t),
    .watch = hook_watch,
    .cause = hook_cause,
    .mismatch = hook_mismatch,
    .mem_of = hook_mem_of,
    .rma = shoal_rma_message,
};
