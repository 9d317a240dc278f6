/* Sockets with deadlines. Every blocking step is a poll() bounded by the
 * caller's absolute deadline, so no socket call here can hang a rank; inside
 * a cancellation scope (cancel.h) the polls are cut into slices and a wait
 * fails with SHOAL_ERR_ABORTED once the scope's flag is set. */
#include "sock.h"

#include "namelist.h"

#include "cancel.h"
#include "clock.h"
#include "config.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* First and last pause between connection attempts to a root that is not
 * listening yet: short at first, since ranks usually start together. */
#define SHOAL_SOCK_RETRY_MIN_NS 1000000ull
#define SHOAL_SOCK_RETRY_MAX_NS 100000000ull

static socklen_t shoal_sock_len(const shoal_sockaddr_t *addr)
{
    return addr->u.sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                            : sizeof(struct sockaddr_in);
}

uint16_t shoal_sock_port(const shoal_sockaddr_t *addr)
{
    if (addr->u.sa.sa_family == AF_INET6)
        return ntohs(addr->u.sin6.sin6_port);
    return ntohs(addr->u.sin.sin_port);
}

void shoal_sock_set_port(shoal_sockaddr_t *addr, uint16_t port)
{
    if (addr->u.sa.sa_family == AF_INET6)
        addr->u.sin6.sin6_port = htons(port);
    else
        addr->u.sin.sin_port = htons(port);
}

const char *shoal_sock_str(const shoal_sockaddr_t *addr, char *buf)
{
    char host[INET6_ADDRSTRLEN];
    if (addr->u.sa.sa_family == AF_INET &&
        inet_ntop(AF_INET, &addr->u.sin.sin_addr, host, sizeof(host))) {
        snprintf(buf, SHOAL_SOCKADDR_STRLEN, "%s:%u", host, shoal_sock_port(addr));
    } else if (addr->u.sa.sa_family == AF_INET6 &&
               inet_ntop(AF_INET6, &addr->u.sin6.sin6_addr, host, sizeof(host))) {
        snprintf(buf, SHOAL_SOCKADDR_STRLEN, "[%s]:%u", host, shoal_sock_port(addr));
    } else {
        snprintf(buf, SHOAL_SOCKADDR_STRLEN, "<family %d>", addr->u.sa.sa_family);
    }
    return buf;
}

/* ---- choosing an interface ---------------------------------------------- */

/* SHOAL_SOCKET_IFNAME takes NCCL's list syntax (namelist.h), so that
 * NCCL_SOCKET_IFNAME can stand for it. */
int shoal_sock_ifname_selects(const char *spec, const char *name)
{
    return shoal_namelist_selects(spec, name, 0);
}

/* Whether an interface may carry shoal's sockets. Without a setting or with
 * a "^" list, loopback and the bridges of local containers and virtual
 * machines are passed over, since they do not lead to other hosts; a list
 * of names to use may name any interface. */
static int shoal_sock_if_eligible(const struct ifaddrs *ifa, const char *spec)
{
    if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP))
        return 0;
    if (spec[0] && spec[0] != '^')
        return shoal_sock_ifname_selects(spec, ifa->ifa_name);
    if (ifa->ifa_flags & IFF_LOOPBACK)
        return 0;
    if (!strncmp(ifa->ifa_name, "docker", 6) || !strncmp(ifa->ifa_name, "virbr", 5))
        return 0;
    return shoal_sock_ifname_selects(spec, ifa->ifa_name);
}

/* Preference of an address: IPv4 first, then routable IPv6, then link-local
 * IPv6 (usable only with its scope on this link); 0 = unusable. */
static int shoal_sock_addr_rank(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return 3;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LINKLOCAL(a) ? 1 : 2;
    }
    return 0;
}

shoal_status_t shoal_sock_pick_addr(shoal_sockaddr_t *addr_p)
{
    const char *spec = shoal_config_get()->boot.socket_ifname;

    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0) {
        shoal_error(BOOT, "getifaddrs: %s", strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    const struct ifaddrs *best = NULL;
    int best_rank = 0;
    for (const struct ifaddrs *ifa = ifs; ifa; ifa = ifa->ifa_next) {
        if (!shoal_sock_if_eligible(ifa, spec))
            continue;
        int r = shoal_sock_addr_rank(ifa->ifa_addr);
        if (r > best_rank) {
            best = ifa;
            best_rank = r;
        }
    }

    shoal_sockaddr_t addr;
    memset(&addr, 0, sizeof(addr));
    if (best) {
        memcpy(&addr, best->ifa_addr, best->ifa_addr->sa_family == AF_INET6
                                          ? sizeof(struct sockaddr_in6)
                                          : sizeof(struct sockaddr_in));
        shoal_sock_set_port(&addr, 0);
    } else if (spec[0] && spec[0] != '^') {
        shoal_error(BOOT, "SHOAL_SOCKET_IFNAME=%s matches no interface that is up and "
                    "has an address", spec);
        freeifaddrs(ifs);
        return SHOAL_ERR_SYSTEM;
    } else {
        addr.u.sin.sin_family = AF_INET;
        addr.u.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    char text[SHOAL_SOCKADDR_STRLEN];
    shoal_debug(BOOT, "socket address %s (interface %s)", shoal_sock_str(&addr, text),
                best ? best->ifa_name : "loopback fallback");
    freeifaddrs(ifs);
    *addr_p = addr;
    return SHOAL_OK;
}

/* ---- names -------------------------------------------------------------- */

static int shoal_sock_parse_port(const char *text, int *port_p)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < 0 || v > 65535)
        return -1;
    *port_p = (int)v;
    return 0;
}

shoal_status_t shoal_sock_resolve(const char *hostport, int default_port,
                                  shoal_sockaddr_t *addr_p)
{
    if (!hostport || !addr_p || default_port < 0 || default_port > 65535) {
        shoal_error(BOOT, "resolve: invalid argument");
        return SHOAL_ERR_INVALID_ARG;
    }
    char host[SHOAL_CONFIG_STR_MAX];
    int port = default_port;
    const char *port_text = NULL;
    size_t host_len;
    const char *text = hostport;
    if (hostport[0] == '[') {
        const char *close = strchr(hostport, ']');
        if (!close || (close[1] && close[1] != ':')) {
            shoal_error(BOOT, "cannot parse address \"%s\": expected [v6addr]:port",
                        hostport);
            return SHOAL_ERR_INVALID_ARG;
        }
        host_len = (size_t)(close - hostport - 1);
        hostport++;
        port_text = close[1] ? close + 2 : NULL;
    } else {
        const char *colon = strchr(hostport, ':');
        /* More than one colon without brackets is a bare IPv6 address. */
        if (colon && !strchr(colon + 1, ':')) {
            host_len = (size_t)(colon - hostport);
            port_text = colon + 1;
        } else {
            host_len = strlen(hostport);
        }
    }
    if (host_len == 0 || host_len >= sizeof(host)) {
        shoal_error(BOOT, "cannot parse address \"%s\": empty or too long host", text);
        return SHOAL_ERR_INVALID_ARG;
    }
    memcpy(host, hostport, host_len);
    host[host_len] = '\0';
    if (port_text && shoal_sock_parse_port(port_text, &port) != 0) {
        shoal_error(BOOT, "cannot parse port \"%s\" of address \"%s\"", port_text, text);
        return SHOAL_ERR_INVALID_ARG;
    }

    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        shoal_error(BOOT, "cannot resolve \"%s\": %s", host,
                    rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return rc == EAI_NONAME || rc == EAI_FAIL ? SHOAL_ERR_INVALID_ARG : SHOAL_ERR_SYSTEM;
    }
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
        if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6)
            pick = ai;
    if (!pick) {
        shoal_error(BOOT, "\"%s\" has no IPv4 or IPv6 address", host);
        freeaddrinfo(res);
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_sockaddr_t addr;
    memset(&addr, 0, sizeof(addr));
    memcpy(&addr, pick->ai_addr, pick->ai_addrlen < sizeof(addr) ? pick->ai_addrlen : sizeof(addr));
    freeaddrinfo(res);
    shoal_sock_set_port(&addr, (uint16_t)port);
    *addr_p = addr;
    return SHOAL_OK;
}

/* ---- listen and connect ------------------------------------------------- */

static void shoal_sock_set_nodelay(int fd)
{
    int one = 1;
    /* Control messages are small and answered at once; Nagle would only
     * delay them. Failure is harmless, so it is not an error. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        shoal_debug(BOOT, "TCP_NODELAY: %s", strerror(errno));
}

void shoal_sock_keepalive(int fd, int interval_s)
{
    int one = 1, count = 5;
    /* Probes go out only while nothing sent waits for its acknowledgement;
     * the user timeout covers the other case, with the same bound. */
    unsigned user_ms = (unsigned)(count + 1) * (unsigned)interval_s * 1000u;
    /* Without these a peer whose host vanished looks idle forever. Failure
     * only costs that detection, so it is logged, not returned. */
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &interval_s, sizeof(interval_s)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms)) != 0)
        shoal_debug(BOOT, "TCP keepalive: %s", strerror(errno));
}

static int shoal_sock_set_blocking(int fd, int blocking)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0)
        return -1;
    flags = blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK;
    return fcntl(fd, F_SETFL, flags);
}

/* A bound socket, listening when listen_too. */
static shoal_status_t shoal_sock_open(shoal_sockaddr_t *addr, int listen_too, int *fd_p)
{
    char text[SHOAL_SOCKADDR_STRLEN];
    int fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        shoal_error(BOOT, "socket: %s", strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    int one = 1;
    /* A restarted job reuses the port of the last one at once instead of
     * waiting for its connections in TIME_WAIT to expire. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
        shoal_error(BOOT, "SO_REUSEADDR: %s", strerror(errno));
        goto err_close_fd;
    }
    if (bind(fd, &addr->u.sa, shoal_sock_len(addr)) != 0) {
        shoal_error(BOOT, "bind %s: %s", shoal_sock_str(addr, text), strerror(errno));
        goto err_close_fd;
    }
    if (listen_too && listen(fd, SOMAXCONN) != 0) {
        shoal_error(BOOT, "listen %s: %s", shoal_sock_str(addr, text), strerror(errno));
        goto err_close_fd;
    }
    shoal_sockaddr_t bound;
    socklen_t len = sizeof(bound);
    if (getsockname(fd, &bound.u.sa, &len) != 0) {
        shoal_error(BOOT, "getsockname: %s", strerror(errno));
        goto err_close_fd;
    }
    shoal_sock_set_port(addr, shoal_sock_port(&bound));
    shoal_debug(BOOT, "%s %s", listen_too ? "listening on" : "bound to",
                shoal_sock_str(addr, text));
    *fd_p = fd;
    return SHOAL_OK;

err_close_fd:
    close(fd);
    return SHOAL_ERR_SYSTEM;
}

shoal_status_t shoal_sock_listen(shoal_sockaddr_t *addr, int *fd_p)
{
    return shoal_sock_open(addr, 1, fd_p);
}

shoal_status_t shoal_sock_bind(shoal_sockaddr_t *addr, int *fd_p)
{
    return shoal_sock_open(addr, 0, fd_p);
}

/* Errors after which a later attempt may succeed: nobody listening yet, or
 * the listener's queue was full. */
static int shoal_sock_connect_retryable(int err)
{
    return err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET ||
           err == EAGAIN || err == EINTR;
}

/* One non-blocking connection attempt bounded by deadline. Returns 0 and a
 * connected fd, or -1 with errno (ETIMEDOUT once the deadline passed,
 * ECANCELED once this thread's cancellation scope was set). */
static int shoal_sock_connect_once(const shoal_sockaddr_t *addr, uint64_t deadline_ns,
                                   int *fd_p)
{
    int fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, &addr->u.sa, shoal_sock_len(addr)) != 0) {
        if (errno != EINPROGRESS)
            goto err_close_fd;
        for (;;) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int n = poll(&pfd, 1, shoal_cancel_ms_left(deadline_ns));
            if (n > 0)
                break;
            if (n < 0 && errno != EINTR)
                goto err_close_fd;
            if (n == 0 && shoal_cancelled()) {
                errno = ECANCELED;
                goto err_close_fd;
            }
            if (n == 0 && shoal_deadline_passed(deadline_ns)) {
                errno = ETIMEDOUT;
                goto err_close_fd;
            }
        }
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            goto err_close_fd;
        if (err) {
            errno = err;
            goto err_close_fd;
        }
    }
    *fd_p = fd;
    return 0;

err_close_fd: {
        int saved = errno;
        close(fd);
        errno = saved;
    }
    return -1;
}

shoal_status_t shoal_sock_connect(const shoal_sockaddr_t *addr, uint64_t deadline_ns,
                                  int *fd_p)
{
    char text[SHOAL_SOCKADDR_STRLEN];
    uint64_t pause_ns = SHOAL_SOCK_RETRY_MIN_NS;
    int fd;
    for (;;) {
        if (shoal_sock_connect_once(addr, deadline_ns, &fd) == 0)
            break;
        int err = errno;
        if (shoal_cancelled()) {
            shoal_debug(BOOT, "connect to %s: cancelled", shoal_sock_str(addr, text));
            return SHOAL_ERR_ABORTED;
        }
        if (!shoal_sock_connect_retryable(err)) {
            shoal_error(BOOT, "connect to %s: %s", shoal_sock_str(addr, text), strerror(err));
            return SHOAL_ERR_SYSTEM;
        }
        uint64_t now = shoal_coarse_now_ns();
        if (now >= deadline_ns) {
            shoal_error(BOOT, "connect to %s: %s; gave up at the deadline",
                        shoal_sock_str(addr, text), strerror(err));
            return SHOAL_ERR_TIMEOUT;
        }
        shoal_trace(BOOT, "connect to %s: %s; retrying", shoal_sock_str(addr, text),
                    strerror(err));
        /* The root may not listen yet: wait a little, doubling each time. */
        uint64_t wait_ns = pause_ns < deadline_ns - now ? pause_ns : deadline_ns - now;
        if (wait_ns > SHOAL_CANCEL_SLICE_MS * 1000000ull)
            wait_ns = SHOAL_CANCEL_SLICE_MS * 1000000ull;
        struct timespec ts = {.tv_sec = (time_t)(wait_ns / 1000000000ull),
                              .tv_nsec = (long)(wait_ns % 1000000000ull)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        pause_ns = pause_ns * 2 < SHOAL_SOCK_RETRY_MAX_NS ? pause_ns * 2
                                                          : SHOAL_SOCK_RETRY_MAX_NS;
    }
    if (shoal_sock_set_blocking(fd, 1) != 0) {
        shoal_error(BOOT, "fcntl: %s", strerror(errno));
        close(fd);
        return SHOAL_ERR_SYSTEM;
    }
    shoal_sock_set_nodelay(fd);
    *fd_p = fd;
    return SHOAL_OK;
}

/* ---- data --------------------------------------------------------------- */

/* Wait until fd is ready for events or the deadline passes. Returns SHOAL_OK
 * when ready (or in error: the next call reports it), SHOAL_ERR_TIMEOUT,
 * SHOAL_ERR_ABORTED (this thread's cancellation scope) or SHOAL_ERR_SYSTEM. */
static shoal_status_t shoal_sock_wait(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = events};
        int n = poll(&pfd, 1, shoal_cancel_ms_left(deadline_ns));
        if (n > 0)
            return SHOAL_OK;
        if (n < 0 && errno != EINTR) {
            shoal_error(BOOT, "poll: %s", strerror(errno));
            return SHOAL_ERR_SYSTEM;
        }
        if (n == 0 && shoal_cancelled())
            return SHOAL_ERR_ABORTED;
        if (n == 0 && shoal_deadline_passed(deadline_ns))
            return SHOAL_ERR_TIMEOUT;
    }
}

/* Errors that mean the other end went away, as opposed to misuse. */
static int shoal_sock_peer_gone(int err)
{
    return err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ETIMEDOUT ||
           err == EHOSTUNREACH || err == ENETUNREACH || err == ECONNABORTED;
}

shoal_status_t shoal_sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    const char *p = buf;
    while (len > 0) {
        /* MSG_DONTWAIT keeps a blocking socket from outliving the deadline;
         * MSG_NOSIGNAL turns a closed peer into EPIPE instead of SIGPIPE. */
        ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            shoal_status_t s = shoal_sock_wait(fd, POLLOUT, deadline_ns);
            if (s != SHOAL_OK)
                return s;
            continue;
        }
        if (n < 0 && shoal_sock_peer_gone(errno)) {
            shoal_debug(BOOT, "send on fd %d: %s", fd, strerror(errno));
            return SHOAL_ERR_PEER;
        }
        shoal_error(BOOT, "send on fd %d: %s", fd, n < 0 ? strerror(errno) : "no progress");
        return SHOAL_ERR_SYSTEM;
    }
    return SHOAL_OK;
}

shoal_status_t shoal_sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            shoal_debug(BOOT, "recv on fd %d: connection closed by peer", fd);
            return SHOAL_ERR_PEER;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            shoal_status_t s = shoal_sock_wait(fd, POLLIN, deadline_ns);
            if (s != SHOAL_OK)
                return s;
            continue;
        }
        if (shoal_sock_peer_gone(errno)) {
            shoal_debug(BOOT, "recv on fd %d: %s", fd, strerror(errno));
            return SHOAL_ERR_PEER;
        }
        shoal_error(BOOT, "recv on fd %d: %s", fd, strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    return SHOAL_OK;
}
