/* The team's transport driving and its owner's hooks. */
#include "team.h"

#include <stdarg.h>
#include <stdio.h>

void shoal_cost_flat(shoal_cost_ctx_t *cost, int nhosts)
{
    const shoal_links_t *l = &cost->links;
    const shoal_link_cost_t *in = &l->cls[l->intra], *out = &l->cls[l->inter];
    int multi = nhosts > 1;
    cost->link_lat_s = multi && out->lat_s > in->lat_s ? out->lat_s : in->lat_s;
    cost->link_bw_Bps = multi && out->bw_Bps < in->bw_Bps ? out->bw_Bps : in->bw_Bps;
}

shoal_status_t shoal_team_progress(shoal_team_t *team)
{
    for (int t = 0; t < team->ntl; t++) {
        shoal_tl_ctx_t *ctx = team->tl_ctx[t];
        if (ctx) {
            shoal_status_t s = ctx->ops->progress(ctx);
            if (s != SHOAL_OK)
                return s;
        }
    }
    return SHOAL_OK;
}

shoal_status_t shoal_team_sleep(shoal_team_t *team, uint64_t waited_ns, uint64_t timeout_ns)
{
    shoal_tl_ctx_t *ctx = team->tl_sole;
    return ctx ? ctx->ops->sleep(ctx, waited_ns, timeout_ns) : SHOAL_ERR_UNSUPPORTED;
}

shoal_status_t shoal_team_watch(shoal_team_t *team)
{
    return team->hooks->watch(team);
}

void shoal_team_cause(shoal_team_t *team, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    team->hooks->cause(team, text);
}

shoal_status_t shoal_team_mismatch(shoal_team_t *team, int peer, const void *hdr)
{
    return team->hooks->mismatch(team, peer, hdr);
}
