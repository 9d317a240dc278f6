/* Fuzz target: the authentication handshake, with the stranger's bytes
 * as the input, on either side.
 *
 * Input, first byte even: server side. The rest is what a stranger sends
 * to a listening socket (its proof, then its hello), through
 * shoal_acceptor_next; a real client, connected before it, must get
 * through whatever the stranger sends, and the stranger's connection is
 * delivered only when its proof is right.
 * First byte odd: client side. The rest is what the server sends (its
 * challenge, then its verdict) to shoal_auth_client, which succeeds only
 * when the verdict proves the secret.
 *
 * The nonces come from a fixed sequence here instead of RAND_bytes, so
 * that an input holding a right proof stays right from run to run; the
 * seeds hold such proofs. */
#define RAND_bytes shoal_fuzz_rand_bytes
#include "../../src/base/auth.c"
#undef RAND_bytes

#include "fuzz.h"

#include <sys/un.h>

#define FUZZ_HELLO_BYTES 16

static const uint8_t fuzz_secret[SHOAL_SECRET_BYTES] = "shoal fuzz secret, 32 bytes long";
static const uint8_t fuzz_good_hello[FUZZ_HELLO_BYTES] = "the real client";
static struct sockaddr_un fuzz_addr;
static int fuzz_listen_fd = -1;

/* The nonce of every handshake of this process: the same bytes each time. */
int shoal_fuzz_rand_bytes(unsigned char *buf, int num)
{
    for (int i = 0; i < num; i++)
        buf[i] = (unsigned char)(0x5a ^ i * 29);
    return 1;
}

static const uint8_t *fuzz_nonce(void)
{
    static uint8_t nonce[SHOAL_AUTH_NONCE_BYTES];
    shoal_fuzz_rand_bytes(nonce, sizeof(nonce));
    return nonce;
}

/* A client's proof (magic, version, nonce_c, MAC) answering the fixed
 * server nonce; writes SHOAL_AUTH_PROOF_BYTES. */
static void fuzz_proof(const uint8_t nonce_c[SHOAL_AUTH_NONCE_BYTES], uint8_t *out)
{
    shoal_auth_put_u32(out, SHOAL_AUTH_MAGIC);
    shoal_auth_put_u32(out + 4, SHOAL_AUTH_VERSION);
    memcpy(out + 8, nonce_c, SHOAL_AUTH_NONCE_BYTES);
    fuzz_assert(shoal_auth_mac(fuzz_secret, shoal_auth_client_label, fuzz_nonce(), nonce_c,
                               out + 8 + SHOAL_AUTH_NONCE_BYTES) == SHOAL_OK);
}

/* A server's challenge with nonce_s and its accepting verdict for the
 * fixed client nonce; writes SHOAL_AUTH_CHALLENGE_BYTES + _VERDICT_BYTES. */
static void fuzz_challenge_verdict(const uint8_t nonce_s[SHOAL_AUTH_NONCE_BYTES], uint8_t *out)
{
    shoal_auth_put_u32(out, SHOAL_AUTH_MAGIC);
    shoal_auth_put_u32(out + 4, SHOAL_AUTH_VERSION);
    memcpy(out + 8, nonce_s, SHOAL_AUTH_NONCE_BYTES);
    uint8_t *verdict = out + SHOAL_AUTH_CHALLENGE_BYTES;
    shoal_auth_put_u32(verdict, SHOAL_AUTH_ACCEPTED);
    fuzz_assert(shoal_auth_mac(fuzz_secret, shoal_auth_server_label, fuzz_nonce(), nonce_s,
                               verdict + 4) == SHOAL_OK);
}

static void fuzz_seeds(void)
{
    uint8_t in[1 + SHOAL_AUTH_PROOF_BYTES + FUZZ_HELLO_BYTES];
    uint8_t nonce[SHOAL_AUTH_NONCE_BYTES];
    for (size_t i = 0; i < sizeof(nonce); i++)
        nonce[i] = (uint8_t)(i * 3 + 1);

    /* Server side: a stranger that knows the secret, one that gives up
     * after its proof, one with a wrong MAC, and one speaking HTTP. */
    in[0] = 0;
    fuzz_proof(nonce, in + 1);
    memcpy(in + 1 + SHOAL_AUTH_PROOF_BYTES, "hello, rank 0 .", FUZZ_HELLO_BYTES);
    fuzz_seed("server-ok", in, sizeof(in));
    fuzz_seed("server-no-hello", in, 1 + SHOAL_AUTH_PROOF_BYTES);
    fuzz_seed("server-half-proof", in, 1 + SHOAL_AUTH_PROOF_BYTES / 2);
    in[1 + SHOAL_AUTH_PROOF_BYTES - 1] ^= 1;
    fuzz_seed("server-bad-mac", in, sizeof(in));
    static const char http[] = "\0GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    fuzz_seed("server-http", http, sizeof(http) - 1);

    /* Client side: a server that knows the secret, one that refuses, one
     * with a wrong MAC, one that stops after its challenge. */
    uint8_t cl[1 + SHOAL_AUTH_CHALLENGE_BYTES + SHOAL_AUTH_VERDICT_BYTES];
    cl[0] = 1;
    fuzz_challenge_verdict(nonce, cl + 1);
    fuzz_seed("client-ok", cl, sizeof(cl));
    fuzz_seed("client-no-verdict", cl, 1 + SHOAL_AUTH_CHALLENGE_BYTES);
    cl[sizeof(cl) - 1] ^= 1;
    fuzz_seed("client-bad-mac", cl, sizeof(cl));
    shoal_auth_put_u32(cl + 1 + SHOAL_AUTH_CHALLENGE_BYTES, SHOAL_AUTH_REFUSED);
    fuzz_seed("client-refused", cl, sizeof(cl));
    shoal_auth_put_u32(cl + 5, SHOAL_AUTH_VERSION + 1);
    fuzz_seed("client-version2", cl, sizeof(cl));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_setup(fuzz_seeds);
    /* A Unix socket in the abstract namespace: the acceptor treats it as
     * any listening socket, and it needs no port and leaves no file. */
    fuzz_addr.sun_family = AF_UNIX;
    snprintf(fuzz_addr.sun_path + 1, sizeof(fuzz_addr.sun_path) - 1, "shoal-fuzz-auth-%d",
             (int)getpid());
    fuzz_listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    fuzz_assert(fuzz_listen_fd >= 0);
    fuzz_assert(bind(fuzz_listen_fd, (struct sockaddr *)&fuzz_addr, sizeof(fuzz_addr)) == 0);
    fuzz_assert(listen(fuzz_listen_fd, 16) == 0);
    return 0;
}

/* A connection to the listener that sends len bytes of data (what the
 * socket buffer takes before anyone reads: far more than an input) and
 * then stops writing. */
static int fuzz_dial(const uint8_t *data, size_t len)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    fuzz_assert(fd >= 0);
    fuzz_assert(fuzz_connect(fd, (struct sockaddr *)&fuzz_addr, sizeof(fuzz_addr)) == 0);
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n <= 0)
            break;
        data += n;
        len -= (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    return fd;
}

static void fuzz_server(const uint8_t *data, size_t size)
{
    uint8_t good[SHOAL_AUTH_PROOF_BYTES + FUZZ_HELLO_BYTES];
    fuzz_proof(fuzz_nonce(), good);
    memcpy(good + SHOAL_AUTH_PROOF_BYTES, fuzz_good_hello, FUZZ_HELLO_BYTES);

    shoal_acceptor_t *acc;
    fuzz_assert(shoal_acceptor_create(fuzz_listen_fd, fuzz_secret, FUZZ_HELLO_BYTES, &acc) ==
                SHOAL_OK);
    /* The acceptor steps the newest handshake first: the stranger's bytes
     * are all read before the real client could be delivered. */
    int client = fuzz_dial(good, sizeof(good));
    int stranger = fuzz_dial(data, size);
    for (;;) {
        uint8_t hello[FUZZ_HELLO_BYTES];
        int fd;
        shoal_status_t s =
            shoal_acceptor_next(acc, shoal_deadline_after(FUZZ_DEADLINE_NS), hello, &fd);
        fuzz_assert(s == SHOAL_OK);
        close(fd);
        if (!memcmp(hello, fuzz_good_hello, FUZZ_HELLO_BYTES))
            break;
        /* The stranger's: it must have proved the secret. */
        uint8_t expect[SHOAL_AUTH_MAC_BYTES];
        fuzz_assert(size >= SHOAL_AUTH_PROOF_BYTES + FUZZ_HELLO_BYTES);
        fuzz_assert(shoal_auth_header_ok(data));
        fuzz_assert(shoal_auth_mac(fuzz_secret, shoal_auth_client_label, fuzz_nonce(), data + 8,
                                   expect) == SHOAL_OK);
        fuzz_assert(!memcmp(expect, data + 8 + SHOAL_AUTH_NONCE_BYTES, sizeof(expect)));
        fuzz_assert(!memcmp(hello, data + SHOAL_AUTH_PROOF_BYTES, FUZZ_HELLO_BYTES));
    }
    shoal_acceptor_destroy(acc);
    close(client);
    close(stranger);
}

static void fuzz_client(const uint8_t *data, size_t size)
{
    int server;
    int fd = fuzz_peer(data, size, 0, &server);
    shoal_status_t s = shoal_auth_client(fd, fuzz_secret, shoal_deadline_after(FUZZ_DEADLINE_NS));
    fuzz_assert(s == SHOAL_OK || s == SHOAL_ERR_AUTH || s == SHOAL_ERR_PEER);
    if (s == SHOAL_OK) {
        /* Only a server that holds the secret gets this far. */
        const uint8_t *verdict = data + SHOAL_AUTH_CHALLENGE_BYTES;
        uint8_t expect[SHOAL_AUTH_MAC_BYTES];
        fuzz_assert(size >= SHOAL_AUTH_CHALLENGE_BYTES + SHOAL_AUTH_VERDICT_BYTES);
        fuzz_assert(shoal_auth_header_ok(data));
        fuzz_assert(shoal_auth_get_u32(verdict) == SHOAL_AUTH_ACCEPTED);
        fuzz_assert(shoal_auth_mac(fuzz_secret, shoal_auth_server_label, fuzz_nonce(), data + 8,
                                   expect) == SHOAL_OK);
        fuzz_assert(!memcmp(expect, verdict + 4, sizeof(expect)));
    }
    close(fd);
    close(server);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        fuzz_client(data + 1, size - 1);
    else
        fuzz_server(data + 1, size - 1);
    return 0;
}
