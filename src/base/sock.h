/* Sockets with deadlines: address choice, listen, connect, full send and
 * receive. Every call that may block takes an absolute deadline
 * (shoal_deadline_after) and fails with SHOAL_ERR_TIMEOUT past it, or with
 * SHOAL_ERR_ABORTED soon after the flag of the calling thread's
 * cancellation scope is set (cancel.h). */
#ifndef SHOAL_SOCK_H
#define SHOAL_SOCK_H

#include "shoal.h"

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct {
    union {
        struct sockaddr sa;
        struct sockaddr_in sin;
        struct sockaddr_in6 sin6;
    } u;
} shoal_sockaddr_t;

#define SHOAL_SOCKADDR_STRLEN 64

/* Address of the interface chosen by SHOAL_SOCKET_IFNAME, or the default:
 * the first up non-loopback interface with an address, else loopback. Port 0. */
shoal_status_t shoal_sock_pick_addr(shoal_sockaddr_t *addr_p);

/* Whether the SHOAL_SOCKET_IFNAME spec lets interface name carry sockets,
 * by name alone: "" selects every name; "eth,ib" names starting so; "=eth0"
 * exact names (a leading "=" covers the whole list, "=" before a later
 * name just that name); "^" first selects every name but those listed. */
int shoal_sock_ifname_selects(const char *spec, const char *name);

/* "host", "host:port" or "[v6]:port" (numeric or resolvable name); the port
 * defaults to default_port. */
shoal_status_t shoal_sock_resolve(const char *hostport, int default_port,
                                  shoal_sockaddr_t *addr_p);

/* Listen on addr (port 0 picks a free one); *addr is updated with the bound
 * port. The socket is non-blocking and close-on-exec. */
shoal_status_t shoal_sock_listen(shoal_sockaddr_t *addr, int *fd_p);
/* The same, bound but not listening: the port is reserved, and connections
 * to it are refused until listen() is called on fd. */
shoal_status_t shoal_sock_bind(shoal_sockaddr_t *addr, int *fd_p);

/* Connect, retrying refused connections until deadline. Blocking fd. */
shoal_status_t shoal_sock_connect(const shoal_sockaddr_t *addr, uint64_t deadline_ns,
                                  int *fd_p);

/* Send or receive exactly len bytes before the deadline. A peer that closes
 * gives SHOAL_ERR_PEER. Works on blocking and non-blocking sockets. */
shoal_status_t shoal_sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns);
shoal_status_t shoal_sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns);

/* Heartbeats on an established connection: TCP keepalive probes after
 * interval_s idle seconds, then every interval_s, and the connection fails
 * after 5 unanswered, or when data it sent stays unacknowledged for 6
 * intervals (a vanished host or a cut link is noticed). For connections
 * whose peer always reads soon (the bootstrap star): a peer that stops
 * reading for that long with a full window fails it too. */
void shoal_sock_keepalive(int fd, int interval_s);

/* Text form "a.b.c.d:port" into buf (SHOAL_SOCKADDR_STRLEN bytes); returns buf. */
const char *shoal_sock_str(const shoal_sockaddr_t *addr, char *buf);

uint16_t shoal_sock_port(const shoal_sockaddr_t *addr);
void shoal_sock_set_port(shoal_sockaddr_t *addr, uint16_t port);

#endif
