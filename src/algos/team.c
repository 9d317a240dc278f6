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

shoal_status_t shoal_team_rma_take(shoal_team_t *team, shoal_ep_t *ep, const void **buf_p,
                                   size_t *len_p, unsigned char *hdr)
{
    shoal_status_t s = SHOAL_OK;
    while (s == SHOAL_OK && hdr[SHOAL_HDR_KIND_AT] == SHOAL_HDR_KIND_RMA) {
        if (!team->hooks->rma)
            return SHOAL_OK; /* the caller's header check finds the mismatch */
        s = team->hooks->rma(team, ep->peer, hdr, *buf_p, *len_p);
        if (s == SHOAL_OK)
            s = ep->ops->recv_release(ep);
        if (s == SHOAL_OK)
            s = ep->ops->recv_slot(ep, buf_p, len_p, hdr);
    }
    return s;
}

shoal_status_t shoal_team_rma_drain(shoal_team_t *team)
{
    if (!atomic_load_explicit(&team->rma_on, memory_order_relaxed))
        return SHOAL_OK;
    for (int q = 0; q < team->nranks; q++) {
        shoal_ep_t *ep = team->eps[q];
        const void *buf;
        size_t len;
        unsigned char hdr[SHOAL_TL_HDR_BYTES];
        /* No connection, nothing to take: a look would dial the peer,
         * which may not call in for longer than the dial may wait. */
        if (!ep || ep->offline)
            continue;
        /* What stays at the head is an operation's piece, which its
         * operation takes; a failed peer is that operation's to report. */
        shoal_status_t s = shoal_team_recv_slot(team, ep, &buf, &len, hdr);
        if (s == SHOAL_ERR_MISMATCH || s == SHOAL_ERR_INVALID_ARG)
            return s;
    }
    return SHOAL_OK;
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
