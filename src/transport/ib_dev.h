/* RDMA devices and ports (ib_dev.c): every active port of every device
 * that libibverbs lists and SHOAL_IB_HCA selects, with the address the ib
 * transport would give it: the LID on InfiniBand, the GID entry on RoCE
 * (SHOAL_IB_GID_INDEX, else the RoCE v2 entry of an IPv4 address, read
 * from the device and sysfs, never assumed to sit at one index).
 *
 * Ownership: a list comes from shoal_ib_ports_find and leaves through
 * shoal_ib_ports_free. Thread-safety: find and free touch only the list
 * they are given. */
#ifndef SHOAL_IB_DEV_H
#define SHOAL_IB_DEV_H

#include "shoal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SHOAL_IB_NAME_MAX 64
#define SHOAL_IB_GID_TYPE_MAX 16

typedef enum {
    SHOAL_IB_LINK_IB = 1,  /* InfiniBand: addressed by LID */
    SHOAL_IB_LINK_ETH = 2, /* RoCE: addressed by GID */
} shoal_ib_link_t;

typedef struct {
    char dev[SHOAL_IB_NAME_MAX];
    int port;             /* from 1 */
    shoal_ib_link_t link;
    uint16_t lid;
    int mtu;              /* the active MTU, bytes */
    double gbps;          /* the signalling rate: lane speed x lanes */
    int gid_index;        /* -1: none this port can use */
    uint8_t gid[16];
    char gid_type[SHOAL_IB_GID_TYPE_MAX]; /* "RoCE v2", "IB/RoCE v1"; "" on InfiniBand */
} shoal_ib_port_t;

typedef struct {
    int nports;
    shoal_ib_port_t *ports;
    char why[256];        /* with no port: why (no library, no device, none active...) */
} shoal_ib_list_t;

/* Fills list (nports may be 0, with the reason in why). SHOAL_OK, or
 * SHOAL_ERR_NO_MEMORY. */
shoal_status_t shoal_ib_ports_find(shoal_ib_list_t *list);
void shoal_ib_ports_free(shoal_ib_list_t *list);
/* One line per port, or the reason there is none. */
void shoal_ib_ports_print(const shoal_ib_list_t *list, FILE *out);

/* The GID entry a RoCE port uses, from the sysfs tree under sysfs
 * ("/sys" on a live machine): forced >= 0 when it is below table_len;
 * else the first "RoCE v2" entry whose GID is an IPv4-mapped address, else
 * the first "RoCE v2" entry; -1 when none. The entry's type goes to type
 * (cap bytes). */
int shoal_ib_pick_gid(const char *sysfs, const char *dev, int port, int table_len, int forced,
                      char *type, size_t cap);

#endif
