/* Sockets and the authenticated acceptor: address parsing and choice,
 * connections with deadlines, and handshakes against right and wrong
 * secrets, garbage, silence and floods of pending strangers. */
#include "harness.h"

#include "base/auth.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC 1000000000ull

static const uint8_t good_secret[SHOAL_SECRET_BYTES] = "0123456789abcdef0123456789abcdef";
static const uint8_t bad_secret[SHOAL_SECRET_BYTES] = "0123456789abcdef0123456789abcdeX";

static shoal_sockaddr_t loopback4(uint16_t port)
{
    shoal_sockaddr_t a;
    memset(&a, 0, sizeof(a));
    a.u.sin.sin_family = AF_INET;
    a.u.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.u.sin.sin_port = htons(port);
    return a;
}

/* ---- names -------------------------------------------------------------- */

static void test_resolve_ipv4(void **state)
{
    shoal_sockaddr_t a;
    char text[SHOAL_SOCKADDR_STRLEN];
    assert_int_equal(shoal_sock_resolve("127.0.0.1:1234", 99, &a), SHOAL_OK);
    assert_int_equal(a.u.sa.sa_family, AF_INET);
    assert_int_equal(shoal_sock_port(&a), 1234);
    assert_string_equal(shoal_sock_str(&a, text), "127.0.0.1:1234");
    assert_int_equal(shoal_sock_resolve("127.0.0.1", 99, &a), SHOAL_OK);
    assert_int_equal(shoal_sock_port(&a), 99);
    shoal_sock_set_port(&a, 7);
    assert_string_equal(shoal_sock_str(&a, text), "127.0.0.1:7");
}

static void test_resolve_ipv6(void **state)
{
    shoal_sockaddr_t a;
    char text[SHOAL_SOCKADDR_STRLEN];
    assert_int_equal(shoal_sock_resolve("[::1]:80", 5, &a), SHOAL_OK);
    assert_int_equal(a.u.sa.sa_family, AF_INET6);
    assert_int_equal(shoal_sock_port(&a), 80);
    assert_string_equal(shoal_sock_str(&a, text), "[::1]:80");
    assert_int_equal(shoal_sock_resolve("::1", 5, &a), SHOAL_OK);
    assert_int_equal(a.u.sa.sa_family, AF_INET6);
    assert_int_equal(shoal_sock_port(&a), 5);
    assert_int_equal(shoal_sock_resolve("[::1]", 6, &a), SHOAL_OK);
    assert_int_equal(shoal_sock_port(&a), 6);
}

static void test_resolve_name(void **state)
{
    shoal_sockaddr_t a;
    assert_int_equal(shoal_sock_resolve("localhost:4242", 1, &a), SHOAL_OK);
    assert_true(a.u.sa.sa_family == AF_INET || a.u.sa.sa_family == AF_INET6);
    assert_int_equal(shoal_sock_port(&a), 4242);
}

static void test_resolve_bad(void **state)
{
    static const char *const bad[] = {"", ":80", "[::1", "[::1]x", "127.0.0.1:99999",
                                      "127.0.0.1:abc", "127.0.0.1:-1", "[]:80"};
    shoal_sockaddr_t a;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(shoal_sock_resolve(bad[i], 1, &a), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_sock_resolve(NULL, 1, &a), SHOAL_ERR_INVALID_ARG);
    assert_int_equal(shoal_sock_resolve("127.0.0.1", 70000, &a), SHOAL_ERR_INVALID_ARG);
}

static void test_pick_ifname(void **state)
{
    shoal_sockaddr_t a;
    char text[SHOAL_SOCKADDR_STRLEN];

    harness_setenv("SHOAL_SOCKET_IFNAME", "lo");
    assert_int_equal(shoal_sock_pick_addr(&a), SHOAL_OK);
    assert_int_equal(a.u.sa.sa_family, AF_INET);
    assert_string_equal(shoal_sock_str(&a, text), "127.0.0.1:0");

    harness_setenv("SHOAL_SOCKET_IFNAME", "=lo");
    assert_int_equal(shoal_sock_pick_addr(&a), SHOAL_OK);
    assert_string_equal(shoal_sock_str(&a, text), "127.0.0.1:0");

    harness_setenv("SHOAL_SOCKET_IFNAME", "nosuchif0,=l");
    assert_int_equal(shoal_sock_pick_addr(&a), SHOAL_ERR_SYSTEM);

    /* Excluding everything still leaves the loopback fallback. */
    harness_setenv("SHOAL_SOCKET_IFNAME", "^");
    assert_int_equal(shoal_sock_pick_addr(&a), SHOAL_OK);
    harness_setenv("SHOAL_SOCKET_IFNAME", "^a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,z");
    assert_int_equal(shoal_sock_pick_addr(&a), SHOAL_OK);
    assert_string_equal(shoal_sock_str(&a, text), "127.0.0.1:0");

    harness_setenv("SHOAL_SOCKET_IFNAME", NULL);
    assert_int_equal(shoal_sock_pick_addr(&a), SHOAL_OK);
    assert_true(a.u.sa.sa_family == AF_INET || a.u.sa.sa_family == AF_INET6);
    assert_int_equal(shoal_sock_port(&a), 0);
}

/* ---- connections -------------------------------------------------------- */

/* Accept one connection on a non-blocking listener, bounded by deadline. */
static int accept_one(int lfd, uint64_t deadline_ns)
{
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    if (poll(&pfd, 1, shoal_deadline_ms_left(deadline_ns)) != 1)
        return -1;
    return accept(lfd, NULL, NULL);
}

static void roundtrip(shoal_sockaddr_t *addr)
{
    int lfd, cfd;
    assert_int_equal(shoal_sock_listen(addr, &lfd), SHOAL_OK);
    assert_int_not_equal(shoal_sock_port(addr), 0);
    uint64_t deadline = shoal_deadline_after(10 * SEC);
    assert_int_equal(shoal_sock_connect(addr, deadline, &cfd), SHOAL_OK);
    int sfd = accept_one(lfd, deadline);
    assert_true(sfd >= 0);

    /* Larger than socket buffers, so both sides must wait on poll. */
    size_t len = 8u << 20;
    unsigned char *out = malloc(len), *in = malloc(len);
    assert_non_null(out);
    assert_non_null(in);
    for (size_t i = 0; i < len; i++)
        out[i] = (unsigned char)(i * 7 + 3);
    pid_t pid = fork();
    if (pid == 0)
        _exit(shoal_sock_send_all(cfd, out, len, deadline) == SHOAL_OK ? 0 : 1);
    assert_int_equal(shoal_sock_recv_all(sfd, in, len, deadline), SHOAL_OK);
    assert_int_equal(harness_wait(pid, 30), 0);
    assert_memory_equal(in, out, len);

    /* Nothing to read before the deadline; then the peer closes. */
    char byte;
    assert_int_equal(shoal_sock_recv_all(sfd, &byte, 1, shoal_deadline_after(SEC / 20)),
                     SHOAL_ERR_TIMEOUT);
    close(cfd);
    assert_int_equal(shoal_sock_recv_all(sfd, &byte, 1, deadline), SHOAL_ERR_PEER);
    free(out);
    free(in);
    close(sfd);
    close(lfd);
}

static void test_roundtrip_ipv4(void **state)
{
    shoal_sockaddr_t a = loopback4(0);
    roundtrip(&a);
}

static void test_roundtrip_ipv6(void **state)
{
    shoal_sockaddr_t a;
    assert_int_equal(shoal_sock_resolve("[::1]:0", 0, &a), SHOAL_OK);
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    int usable = fd >= 0 && bind(fd, &a.u.sa, sizeof(a.u.sin6)) == 0;
    if (fd >= 0)
        close(fd);
    if (!usable)
        skip();
    roundtrip(&a);
}

/* A port with no listener: take a free one and release it. */
static uint16_t free_port(void)
{
    shoal_sockaddr_t a = loopback4(0);
    int fd;
    if (shoal_sock_listen(&a, &fd) != SHOAL_OK)
        return 0;
    close(fd);
    return shoal_sock_port(&a);
}

static void test_connect_refused_until_deadline(void **state)
{
    shoal_sockaddr_t a = loopback4(free_port());
    int fd;
    assert_int_equal(shoal_sock_connect(&a, shoal_deadline_after(SEC / 10), &fd),
                     SHOAL_ERR_TIMEOUT);
}

/* A client that starts before anyone listens gets through once the listener
 * appears: connect retries refused attempts. */
static void test_connect_waits_for_listener(void **state)
{
    shoal_sockaddr_t a = loopback4(free_port());
    pid_t pid = fork();
    if (pid == 0) {
        int fd;
        char byte = 'x';
        if (shoal_sock_connect(&a, shoal_deadline_after(20 * SEC), &fd) != SHOAL_OK)
            _exit(1);
        _exit(shoal_sock_send_all(fd, &byte, 1, shoal_deadline_after(20 * SEC)) == SHOAL_OK
                  ? 0 : 2);
    }
    int lfd;
    assert_int_equal(shoal_sock_listen(&a, &lfd), SHOAL_OK);
    uint64_t deadline = shoal_deadline_after(20 * SEC);
    int sfd = accept_one(lfd, deadline);
    assert_true(sfd >= 0);
    char byte = 0;
    assert_int_equal(shoal_sock_recv_all(sfd, &byte, 1, deadline), SHOAL_OK);
    assert_int_equal(byte, 'x');
    assert_int_equal(harness_wait(pid, 30), 0);
    close(sfd);
    close(lfd);
}

/* ---- handshakes --------------------------------------------------------- */

typedef struct {
    int lfd;
    shoal_sockaddr_t addr;
    shoal_acceptor_t *acc;
} server_t;

static void server_open(server_t *srv, const uint8_t *secret, size_t hello_len)
{
    srv->addr = loopback4(0);
    assert_int_equal(shoal_sock_listen(&srv->addr, &srv->lfd), SHOAL_OK);
    assert_int_equal(shoal_acceptor_create(srv->lfd, secret, hello_len, &srv->acc), SHOAL_OK);
}

static void server_close(server_t *srv)
{
    shoal_acceptor_destroy(srv->acc);
    close(srv->lfd);
}

/* Client process: authenticate with secret, send a hello, expect status. */
static pid_t spawn_client(const shoal_sockaddr_t *addr, const uint8_t *secret,
                          const char *hello, shoal_status_t expect)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    uint64_t deadline = shoal_deadline_after(20 * SEC);
    int fd;
    shoal_status_t s;
    /* Like the bootstrap, try again if a busy acceptor dropped us. */
    for (int attempt = 0; attempt < 5; attempt++) {
        if (shoal_sock_connect(addr, deadline, &fd) != SHOAL_OK)
            _exit(1);
        s = shoal_auth_client(fd, secret, deadline);
        if (s != SHOAL_ERR_PEER)
            break;
        close(fd);
    }
    if (s != expect)
        _exit(2);
    if (s != SHOAL_OK)
        _exit(0);
    if (shoal_sock_send_all(fd, hello, strlen(hello), deadline) != SHOAL_OK)
        _exit(3);
    /* Keep the connection until the server has read everything. */
    char byte;
    shoal_sock_recv_all(fd, &byte, 1, deadline);
    _exit(0);
}

static void test_auth_good(void **state)
{
    server_t srv;
    server_open(&srv, good_secret, 5);
    pid_t pid = spawn_client(&srv.addr, good_secret, "hello", SHOAL_OK);
    char hello[6] = {0};
    int fd;
    assert_int_equal(shoal_acceptor_next(srv.acc, shoal_deadline_after(20 * SEC), hello, &fd),
                     SHOAL_OK);
    assert_string_equal(hello, "hello");
    close(fd);
    assert_int_equal(harness_wait(pid, 30), 0);
    server_close(&srv);
}

/* A wrong secret is refused on both sides, and a real client right after it
 * still gets through. */
static void test_auth_wrong_secret(void **state)
{
    server_t srv;
    server_open(&srv, good_secret, 5);
    pid_t bad = spawn_client(&srv.addr, bad_secret, "bad!!", SHOAL_ERR_AUTH);
    /* Drive the acceptor until the impostor has been turned away: it never
     * yields a connection meanwhile. */
    char hello[6] = {0};
    int fd, st;
    while (waitpid(bad, &st, WNOHANG) == 0)
        assert_int_equal(shoal_acceptor_next(srv.acc, shoal_deadline_after(SEC / 100), hello,
                                             &fd), SHOAL_ERR_TIMEOUT);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    pid_t good = spawn_client(&srv.addr, good_secret, "hello", SHOAL_OK);
    assert_int_equal(shoal_acceptor_next(srv.acc, shoal_deadline_after(20 * SEC), hello, &fd),
                     SHOAL_OK);
    assert_string_equal(hello, "hello");
    close(fd);
    assert_int_equal(harness_wait(good, 30), 0);
    server_close(&srv);
}

/* A server that does not know the secret cannot pass as one: it answers the
 * client's proof with "accepted" and a made-up proof of its own. */
static void test_auth_fake_server(void **state)
{
    shoal_sockaddr_t addr = loopback4(0);
    int lfd;
    assert_int_equal(shoal_sock_listen(&addr, &lfd), SHOAL_OK);
    pid_t pid = spawn_client(&addr, good_secret, "hello", SHOAL_ERR_AUTH);
    uint64_t deadline = shoal_deadline_after(20 * SEC);
    int fd = accept_one(lfd, deadline);
    assert_true(fd >= 0);
    uint8_t challenge[40] = {'S', 'H', 'A', 'L', 0, 0, 0, 1};
    assert_int_equal(shoal_sock_send_all(fd, challenge, sizeof(challenge), deadline), SHOAL_OK);
    uint8_t proof[72];
    assert_int_equal(shoal_sock_recv_all(fd, proof, sizeof(proof), deadline), SHOAL_OK);
    uint8_t verdict[36] = {0};
    assert_int_equal(shoal_sock_send_all(fd, verdict, sizeof(verdict), deadline), SHOAL_OK);
    assert_int_equal(harness_wait(pid, 30), 0);
    close(fd);
    close(lfd);
}

/* A client that meets something other than a shoal server gives up. */
static void test_auth_not_a_server(void **state)
{
    shoal_sockaddr_t addr = loopback4(0);
    int lfd;
    assert_int_equal(shoal_sock_listen(&addr, &lfd), SHOAL_OK);
    pid_t pid = spawn_client(&addr, good_secret, "hello", SHOAL_ERR_AUTH);
    uint64_t deadline = shoal_deadline_after(20 * SEC);
    int fd = accept_one(lfd, deadline);
    assert_true(fd >= 0);
    char banner[40];
    memset(banner, 'G', sizeof(banner));
    assert_int_equal(shoal_sock_send_all(fd, banner, sizeof(banner), deadline), SHOAL_OK);
    assert_int_equal(harness_wait(pid, 30), 0);
    close(fd);
    close(lfd);
}

/* Garbage is dropped, silence stays pending, and neither delays a real
 * client that comes after them. */
static void test_acceptor_strangers(void **state)
{
    server_t srv;
    server_open(&srv, good_secret, 5);
    uint64_t deadline = shoal_deadline_after(20 * SEC);
    int silent, noisy;
    assert_int_equal(shoal_sock_connect(&srv.addr, deadline, &silent), SHOAL_OK);
    assert_int_equal(shoal_sock_connect(&srv.addr, deadline, &noisy), SHOAL_OK);
    static const char garbage[] = "GET / HTTP/1.0\r\nHost: example\r\n\r\n";
    assert_int_equal(shoal_sock_send_all(noisy, garbage, sizeof(garbage), deadline), SHOAL_OK);

    pid_t pid = spawn_client(&srv.addr, good_secret, "hello", SHOAL_OK);
    char hello[6] = {0};
    int fd;
    assert_int_equal(shoal_acceptor_next(srv.acc, deadline, hello, &fd), SHOAL_OK);
    assert_string_equal(hello, "hello");
    close(fd);
    assert_int_equal(harness_wait(pid, 30), 0);

    /* The garbage sender was disconnected after its challenge. */
    char buf[64];
    shoal_status_t s;
    do
        s = shoal_sock_recv_all(noisy, buf, 1, deadline);
    while (s == SHOAL_OK);
    assert_int_equal(s, SHOAL_ERR_PEER);
    close(noisy);
    close(silent);
    server_close(&srv);
}

/* A non-blocking dial (shoal_auth_dial_*) of the acceptor, both stepped
 * in turn by this one thread, as lazy tcp steps them from progress. */
static int dial_socket(const shoal_sockaddr_t *addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int r = connect(fd, &addr->u.sa, sizeof(addr->u.sin));
    assert_true(r == 0 || errno == EINPROGRESS);
    return fd;
}

static shoal_status_t dial_and_accept(server_t *srv, const uint8_t *secret, char *hello_p)
{
    int fd = dial_socket(&srv->addr);
    shoal_auth_dial_t d;
    shoal_auth_dial_start(&d, fd, secret, "dial", 5);
    uint64_t deadline = shoal_deadline_after(20 * SEC);
    shoal_status_t s = SHOAL_INPROGRESS;
    int got = 0;
    while ((s == SHOAL_INPROGRESS || !got) && !shoal_deadline_passed(deadline)) {
        if (s == SHOAL_INPROGRESS)
            s = shoal_auth_dial_step(&d);
        int afd;
        shoal_status_t a = shoal_acceptor_next(srv->acc, 0, hello_p, &afd);
        if (a == SHOAL_OK) {
            close(afd);
            got = 1;
        } else {
            assert_int_equal(a, SHOAL_ERR_TIMEOUT);
            if (s != SHOAL_INPROGRESS && s != SHOAL_OK)
                break; /* refused: nothing will come */
        }
    }
    shoal_auth_dial_clear(&d);
    close(fd);
    return s;
}

static void test_dial_nonblocking(void **state)
{
    server_t srv;
    server_open(&srv, good_secret, 5);
    char hello[5] = {0};
    assert_int_equal(dial_and_accept(&srv, good_secret, hello), SHOAL_OK);
    assert_string_equal(hello, "dial");
    /* The wrong secret: the server refuses, the dial says so. */
    assert_int_equal(dial_and_accept(&srv, bad_secret, hello), SHOAL_ERR_AUTH);
    assert_int_equal(shoal_acceptor_pending(srv.acc), 0);
    server_close(&srv);

    /* Nobody listens: refused, and errno says so. */
    int fd = dial_socket(&srv.addr);
    shoal_auth_dial_t d;
    shoal_auth_dial_start(&d, fd, good_secret, "dial", 5);
    uint64_t deadline = shoal_deadline_after(20 * SEC);
    shoal_status_t s;
    while ((s = shoal_auth_dial_step(&d)) == SHOAL_INPROGRESS && !shoal_deadline_passed(deadline))
        ;
    assert_int_equal(s, SHOAL_ERR_PEER);
    assert_int_equal(errno, ECONNREFUSED);
    close(fd);
}

/* A listener that stays open drops a handshake left hanging. */
static void test_acceptor_expire(void **state)
{
    server_t srv;
    server_open(&srv, good_secret, 5);
    uint64_t deadline = shoal_deadline_after(20 * SEC);
    int silent;
    assert_int_equal(shoal_sock_connect(&srv.addr, deadline, &silent), SHOAL_OK);
    char hello[5];
    int fd;
    while (shoal_acceptor_pending(srv.acc) == 0 && !shoal_deadline_passed(deadline))
        assert_int_equal(shoal_acceptor_next(srv.acc, 0, hello, &fd), SHOAL_ERR_TIMEOUT);
    assert_int_equal(shoal_acceptor_pending(srv.acc), 1);
    shoal_acceptor_expire(srv.acc, 60 * SEC); /* young: kept */
    assert_int_equal(shoal_acceptor_pending(srv.acc), 1);
    shoal_acceptor_expire(srv.acc, 0);
    assert_int_equal(shoal_acceptor_pending(srv.acc), 0);
    char buf[64];
    shoal_status_t s;
    do
        s = shoal_sock_recv_all(silent, buf, 1, deadline);
    while (s == SHOAL_OK);
    assert_int_equal(s, SHOAL_ERR_PEER);
    close(silent);
    server_close(&srv);
}

/* More silent strangers than the acceptor keeps: the oldest are dropped and
 * a real client still gets through. */
static void test_acceptor_flood(void **state)
{
    enum { NSILENT = 80 };
    server_t srv;
    server_open(&srv, good_secret, 5);
    uint64_t deadline = shoal_deadline_after(20 * SEC);
    int silent[NSILENT];
    for (int i = 0; i < NSILENT; i++)
        assert_int_equal(shoal_sock_connect(&srv.addr, deadline, &silent[i]), SHOAL_OK);
    pid_t pid = spawn_client(&srv.addr, good_secret, "hello", SHOAL_OK);
    char hello[6] = {0};
    int fd;
    assert_int_equal(shoal_acceptor_next(srv.acc, deadline, hello, &fd), SHOAL_OK);
    assert_string_equal(hello, "hello");
    close(fd);
    assert_int_equal(harness_wait(pid, 30), 0);
    /* The first stranger was evicted: perhaps a challenge, then EOF. */
    uint8_t byte;
    shoal_status_t s;
    do
        s = shoal_sock_recv_all(silent[0], &byte, 1, deadline);
    while (s == SHOAL_OK);
    assert_int_equal(s, SHOAL_ERR_PEER);
    for (int i = 0; i < NSILENT; i++)
        close(silent[i]);
    server_close(&srv);
}

/* More real clients at once than the acceptor keeps pending: they answer
 * quickly, so all get through. */
static void test_acceptor_many_clients(void **state)
{
    enum { NCLIENTS = 100 };
    server_t srv;
    server_open(&srv, good_secret, 5);
    pid_t pids[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++)
        pids[i] = spawn_client(&srv.addr, good_secret, "hello", SHOAL_OK);
    uint64_t deadline = shoal_deadline_after(60 * SEC);
    int fds[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++) {
        char hello[6] = {0};
        assert_int_equal(shoal_acceptor_next(srv.acc, deadline, hello, &fds[i]), SHOAL_OK);
        assert_string_equal(hello, "hello");
    }
    for (int i = 0; i < NCLIENTS; i++)
        close(fds[i]);
    for (int i = 0; i < NCLIENTS; i++)
        assert_int_equal(harness_wait(pids[i], 30), 0);
    server_close(&srv);
}

static void test_random(void **state)
{
    uint8_t a[64], b[64];
    assert_int_equal(shoal_auth_random(a, sizeof(a)), SHOAL_OK);
    assert_int_equal(shoal_auth_random(b, sizeof(b)), SHOAL_OK);
    assert_memory_not_equal(a, b, sizeof(a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve_ipv4),
        cmocka_unit_test(test_resolve_ipv6),
        cmocka_unit_test(test_resolve_name),
        cmocka_unit_test(test_resolve_bad),
        cmocka_unit_test(test_pick_ifname),
        cmocka_unit_test(test_roundtrip_ipv4),
        cmocka_unit_test(test_roundtrip_ipv6),
        cmocka_unit_test(test_connect_refused_until_deadline),
        cmocka_unit_test(test_connect_waits_for_listener),
        cmocka_unit_test(test_auth_good),
        cmocka_unit_test(test_auth_wrong_secret),
        cmocka_unit_test(test_auth_fake_server),
        cmocka_unit_test(test_auth_not_a_server),
        cmocka_unit_test(test_dial_nonblocking),
        cmocka_unit_test(test_acceptor_expire),
        cmocka_unit_test(test_acceptor_strangers),
        cmocka_unit_test(test_acceptor_flood),
        cmocka_unit_test(test_acceptor_many_clients),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
