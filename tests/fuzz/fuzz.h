/* What the fuzz targets share: logging that formats every message but
 * shows none, seed files, and sockets that deliver a fuzz input as the
 * bytes a peer sent.
 *
 * Each target includes one library source (to reach its static parsers)
 * and then this header, defines fuzz_seeds() and calls fuzz_setup() from
 * LLVMFuzzerInitialize. With SHOAL_FUZZ_SEEDS=DIR in the environment the
 * target writes its seed inputs into DIR and exits instead of fuzzing
 * (make fuzz-corpus); the seeds come from shoal's own senders and packers
 * wherever it has them, so they stay valid when a format changes. */
#ifndef SHOAL_FUZZ_H
#define SHOAL_FUZZ_H

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Deadline of every blocking call a target makes. Inputs never need it
 * (the peer's end is closed once its bytes are written), and it stays
 * below run.sh's -timeout so that a call that ignores its deadline is
 * reported as a hang, while one that honours it returns. */
#define FUZZ_DEADLINE_NS 2000000000ull

/* A property of the code under test does not hold: report it as a crash,
 * with the input that libFuzzer saves. */
#define fuzz_assert(cond) ((cond) ? (void)0 : fuzz_fail(#cond, __FILE__, __LINE__))

static inline void fuzz_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "%s:%d: fuzz property violated: %s\n", file, line, cond);
    abort();
}

/* Writes one seed into $SHOAL_FUZZ_SEEDS as seed-<name>. */
static inline void fuzz_seed(const char *name, const void *buf, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/seed-%s", getenv("SHOAL_FUZZ_SEEDS"), name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "cannot write seed %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

/* Logging at trace level into /dev/null, so that the arguments of every
 * message (which print bytes a peer sent) are formatted too; with
 * SHOAL_DEBUG set, the usual settings, to read what a crashing input does. */
static inline void fuzz_setup(void (*seeds)(void))
{
    if (getenv("SHOAL_DEBUG"))
        shoal_config_get();
    else
        shoal_log_setup(SHOAL_LOG_TRACE, SHOAL_SUBSYS_ALL, "/dev/null");
    if (getenv("SHOAL_FUZZ_SEEDS")) {
        seeds();
        exit(0);
    }
}

/* A connected socket from which len bytes of data can be read. The
 * peer's end is closed after the bytes (close_peer), or only shut for
 * writing, so that what this side sends is taken, and returned in
 * *peer_p for the caller to close. Bytes beyond what the socket buffer
 * holds are left out; the targets' inputs are far smaller. */
static inline int fuzz_peer(const uint8_t *data, size_t len, int close_peer, int *peer_p)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        perror("socketpair");
        abort();
    }
    while (len > 0) {
        ssize_t n = send(sv[1], data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n <= 0)
            break;
        data += n;
        len -= (size_t)n;
    }
    if (close_peer) {
        close(sv[1]);
        sv[1] = -1;
    } else {
        shutdown(sv[1], SHUT_WR);
    }
    if (peer_p)
        *peer_p = sv[1];
    return sv[0];
}

/* connect(2) that finishes the connection when a signal (libFuzzer's
 * timers) interrupts it; 0 or -1 as connect. */
static inline int fuzz_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    if (connect(fd, addr, len) == 0)
        return 0;
    if (errno != EINTR)
        return -1;
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    while (poll(&pfd, 1, -1) < 0)
        if (errno != EINTR)
            return -1;
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
        return -1;
    errno = err;
    return err == 0 ? 0 : -1;
}

/* accept4(2) of a connection that is on its way, retried after a signal. */
static inline int fuzz_accept(int lfd)
{
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    for (;;) {
        int n = poll(&pfd, 1, (int)(FUZZ_DEADLINE_NS / 1000000));
        if (n == 1) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0 || errno != EINTR)
                return fd;
        } else if (n == 0 || errno != EINTR) {
            return -1;
        }
    }
}

/* Reads what fd holds now (it must not be waiting for more) into buf,
 * at most cap bytes; returns the count. For seeds from shoal's senders. */
static inline size_t fuzz_drain(int fd, uint8_t *buf, size_t cap)
{
    size_t len = 0;
    while (len < cap) {
        ssize_t n = recv(fd, buf + len, cap - len, MSG_DONTWAIT);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    return len;
}

#endif
