/* RDMA devices and ports (ib_dev.h). */
#include "ib_dev.h"

#include "base/config.h"
#include "base/log.h"
#include "base/namelist.h"
#include "ib_verbs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Reads one line of sysfs file path into buf, without its newline; 0 on
 * success. */
static int read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!ok)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* Whether sysfs's text of a GID ("0000:0000:0000:0000:0000:ffff:0ae8:0001")
 * is an IPv4-mapped address. */
static int gid_text_ipv4(const char *text)
{
    return !strncmp(text, "0000:0000:0000:0000:0000:ffff:", 30);
}

int shoal_ib_pick_gid(const char *sysfs, const char *dev, int port, int table_len, int forced,
                      char *type, size_t cap)
{
    char path[512], gid[64], t[SHOAL_IB_GID_TYPE_MAX];
    int first_v2 = -1;
    type[0] = '\0';
    for (int i = 0; i < table_len; i++) {
        if (forced >= 0 && i != forced)
            continue;
        snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%d/gid_attrs/types/%d", sysfs,
                 dev, port, i);
        if (read_line(path, t, sizeof(t)) != 0)
            continue; /* an unused entry has no type */
        if (forced >= 0) {
            snprintf(type, cap, "%s", t);
            return i;
        }
        if (strcmp(t, "RoCE v2"))
            continue;
        snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%d/gids/%d", sysfs, dev,
                 port, i);
        if (read_line(path, gid, sizeof(gid)) != 0)
            continue;
        if (gid_text_ipv4(gid)) {
            snprintf(type, cap, "%s", t);
            return i;
        }
        if (first_v2 < 0)
            first_v2 = i;
    }
    if (first_v2 >= 0)
        snprintf(type, cap, "RoCE v2");
    return first_v2;
}

void shoal_ib_ports_free(shoal_ib_list_t *list)
{
    free(list->ports);
    list->ports = NULL;
    list->nports = 0;
}

#if SHOAL_HAVE_IBVERBS
/* Lane speed in Gbit/s of ibv_port_attr.active_speed (its enum). */
static double lane_gbps(uint8_t speed)
{
    switch (speed) {
    case 1: return 2.5;
    case 2: return 5.0;
    case 4:
    case 8: return 10.0;
    case 16: return 14.0;
    case 32: return 25.0;
    case 64: return 50.0;
    case 128: return 100.0;
    default: return 0;
    }
}

/* Lanes of ibv_port_attr.active_width (its enum). */
static int lanes(uint8_t width)
{
    switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
    }
}

/* Appends the active, selected ports of one open device. */
static shoal_status_t device_ports(const shoal_ibv_t *v, struct ibv_context *ctx,
                                   const char *name, shoal_ib_list_t *list, int *cap_p,
                                   int *inactive_p)
{
    const shoal_ib_config_t *cfg = &shoal_config_get()->ib;
    struct ibv_device_attr dattr;
    if (v->query_device(ctx, &dattr) != 0) {
        shoal_warn(IBV, "ibv_query_device on %s failed: %s", name, strerror(errno));
        return SHOAL_OK;
    }
    for (int p = 1; p <= dattr.phys_port_cnt; p++) {
        struct ibv_port_attr pattr;
        if (shoal_ibv_query_port(v, ctx, (uint8_t)p, &pattr) != 0) {
            shoal_warn(IBV, "ibv_query_port on %s port %d failed: %s", name, p,
                       strerror(errno));
            continue;
        }
        if (!shoal_namelist_selects(cfg->hca, name, p))
            continue;
        if (pattr.state != IBV_PORT_ACTIVE) {
            (*inactive_p)++;
            continue;
        }
        if (list->nports == *cap_p) {
            int cap = *cap_p ? 2 * *cap_p : 4;
            shoal_ib_port_t *grown = realloc(list->ports, (size_t)cap * sizeof(*grown));
            if (!grown)
                return SHOAL_ERR_NO_MEMORY;
            list->ports = grown;
            *cap_p = cap;
        }
        shoal_ib_port_t *o = &list->ports[list->nports];
        memset(o, 0, sizeof(*o));
        snprintf(o->dev, sizeof(o->dev), "%s", name);
        o->port = p;
        o->link = pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? SHOAL_IB_LINK_ETH
                                                              : SHOAL_IB_LINK_IB;
        o->lid = pattr.lid;
        o->mtu = pattr.active_mtu >= IBV_MTU_256 ? 128 << pattr.active_mtu : 0;
        o->gbps = lane_gbps(pattr.active_speed) * lanes(pattr.active_width);
        if (o->link == SHOAL_IB_LINK_ETH)
            o->gid_index = shoal_ib_pick_gid("/sys", name, p, pattr.gid_tbl_len,
                                             cfg->gid_index, o->gid_type, sizeof(o->gid_type));
        else
            o->gid_index = cfg->gid_index >= 0 ? cfg->gid_index : 0;
        union ibv_gid gid;
        if (o->gid_index >= 0 && v->query_gid(ctx, (uint8_t)p, o->gid_index, &gid) == 0)
            memcpy(o->gid, gid.raw, sizeof(o->gid));
        else if (o->gid_index >= 0)
            o->gid_index = -1;
        list->nports++;
    }
    return SHOAL_OK;
}

shoal_status_t shoal_ib_ports_find(shoal_ib_list_t *list)
{
    memset(list, 0, sizeof(*list));
    const char *why;
    const shoal_ibv_t *v = shoal_ibv(&why);
    if (!v) {
        snprintf(list->why, sizeof(list->why), "%s", why);
        return SHOAL_OK;
    }
    int ndev = 0;
    struct ibv_device **devs = v->get_device_list(&ndev);
    if (!devs || ndev == 0) {
        snprintf(list->why, sizeof(list->why), "no RDMA device%s%s%s",
                 devs ? "" : " (ibv_get_device_list: ", devs ? "" : strerror(errno),
                 devs ? "" : ")");
        if (devs)
            v->free_device_list(devs);
        return SHOAL_OK;
    }
    int cap = 0, inactive = 0;
    shoal_status_t s = SHOAL_OK;
    for (int d = 0; d < ndev && s == SHOAL_OK; d++) {
        const char *name = v->get_device_name(devs[d]);
        struct ibv_context *ctx = v->open_device(devs[d]);
        if (!ctx) {
            shoal_warn(IBV, "ibv_open_device %s failed: %s", name ? name : "?",
                       strerror(errno));
            continue;
        }
        s = device_ports(v, ctx, name ? name : "?", list, &cap, &inactive);
        v->close_device(ctx);
    }
    v->free_device_list(devs);
    if (s != SHOAL_OK) {
        shoal_ib_ports_free(list);
        return s;
    }
    if (list->nports == 0)
        snprintf(list->why, sizeof(list->why), "%d device(s), no active port%s%s", ndev,
                 shoal_config_get()->ib.hca[0] ? " that SHOAL_IB_HCA selects" : "",
                 inactive ? " (some are down)" : "");
    return SHOAL_OK;
}
#else
shoal_status_t shoal_ib_ports_find(shoal_ib_list_t *list)
{
    memset(list, 0, sizeof(*list));
    snprintf(list->why, sizeof(list->why),
             "built without rdma-core's headers (libibverbs-dev)");
    return SHOAL_OK;
}
#endif

void shoal_ib_ports_print(const shoal_ib_list_t *list, FILE *out)
{
    if (list->nports == 0) {
        fprintf(out, "    no RDMA port: %s\n", list->why);
        return;
    }
    for (int i = 0; i < list->nports; i++) {
        const shoal_ib_port_t *p = &list->ports[i];
        char gid[INET6_ADDRSTRLEN] = "-";
        if (p->gid_index >= 0)
            inet_ntop(AF_INET6, p->gid, gid, sizeof(gid));
        fprintf(out, "    %s:%d %s, %.0f Gbit/s, MTU %d, LID %u, GID %d %s%s%s%s\n", p->dev,
                p->port, p->link == SHOAL_IB_LINK_ETH ? "RoCE" : "InfiniBand", p->gbps, p->mtu,
                p->lid, p->gid_index, gid, p->gid_type[0] ? " (" : "", p->gid_type,
                p->gid_type[0] ? ")" : "");
    }
}
