/* Fuzz target: the unique id (shoal_boot_id_parse), which reaches a rank
 * from outside its process, and the packed address
 * (shoal_bootstrap_addr_unpack), which travels in the init exchange.
 *
 * The input is the id, zero-padded to its size; its first
 * SHOAL_BOOT_ADDR_BYTES are also unpacked as an address on their own.
 * Whatever the bytes, parsing returns a status; what it accepts is an
 * IPv4 or IPv6 address that survives the packer and the parser again
 * unchanged, so the id a rank forwards (shrink, the NCCL door) means what
 * the one it parsed meant. */
#include "../../src/core/bootstrap.c"

#include "fuzz.h"

#include <arpa/inet.h>

static void fuzz_seed_id(const char *name, const char *host, uint16_t port, uint32_t scope)
{
    shoal_sockaddr_t addr;
    memset(&addr, 0, sizeof(addr));
    if (strchr(host, ':')) {
        addr.u.sin6.sin6_family = AF_INET6;
        addr.u.sin6.sin6_scope_id = scope;
        inet_pton(AF_INET6, host, &addr.u.sin6.sin6_addr);
    } else {
        addr.u.sin.sin_family = AF_INET;
        inet_pton(AF_INET, host, &addr.u.sin.sin_addr);
    }
    shoal_sock_set_port(&addr, port);
    uint8_t secret[SHOAL_SECRET_BYTES];
    for (size_t i = 0; i < sizeof(secret); i++)
        secret[i] = (uint8_t)(i * 37 + 11);
    shoal_unique_id_t id;
    fuzz_assert(shoal_bootstrap_id_make(&addr, secret, &id) == SHOAL_OK);
    fuzz_seed(name, id.bytes, sizeof(id.bytes));
}

static void fuzz_seeds(void)
{
    fuzz_seed_id("v4", "127.0.0.1", 29500, 0);
    fuzz_seed_id("v4-port0", "10.1.2.3", 0, 0);
    fuzz_seed_id("v6", "::1", 65535, 0);
    fuzz_seed_id("v6-scope", "fe80::1", 4242, 3);
    /* An id with the right magic and version but a family of 5, one cut
     * short, and one with the version of a future release. */
    shoal_unique_id_t id;
    memset(&id, 0, sizeof(id));
    shoal_boot_put_u32(id.bytes, SHOAL_BOOT_ID_MAGIC);
    shoal_boot_put_u32(id.bytes + 4, SHOAL_BOOT_ID_VERSION);
    shoal_boot_put_u16(id.bytes + SHOAL_BOOT_ID_FAMILY + SHOAL_BOOT_ADDR_FAMILY, 5);
    fuzz_seed("family5", id.bytes, sizeof(id.bytes));
    fuzz_seed("short", id.bytes, SHOAL_BOOT_ID_FAMILY + 2);
    shoal_boot_put_u32(id.bytes + 4, SHOAL_BOOT_ID_VERSION + 1);
    fuzz_seed("version2", id.bytes, sizeof(id.bytes));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_setup(fuzz_seeds);
    return 0;
}

/* addr is what the parser accepted: pack it and parse it again. */
static void fuzz_check_addr(const shoal_sockaddr_t *addr)
{
    fuzz_assert(addr->u.sa.sa_family == AF_INET || addr->u.sa.sa_family == AF_INET6);
    char text[SHOAL_SOCKADDR_STRLEN];
    shoal_sock_str(addr, text);
    fuzz_assert(memchr(text, '\0', sizeof(text)) != NULL);
    uint8_t packed[SHOAL_BOOT_ADDR_BYTES];
    shoal_bootstrap_addr_pack(addr, packed);
    shoal_sockaddr_t again;
    fuzz_assert(shoal_bootstrap_addr_unpack(packed, &again) == SHOAL_OK);
    fuzz_assert(memcmp(&again, addr, sizeof(again)) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shoal_unique_id_t id;
    memset(&id, 0, sizeof(id));
    memcpy(id.bytes, data, size < sizeof(id.bytes) ? size : sizeof(id.bytes));

    shoal_sockaddr_t root;
    uint8_t secret[SHOAL_SECRET_BYTES];
    if (shoal_boot_id_parse(&id, &root, secret) == SHOAL_OK) {
        fuzz_check_addr(&root);
        shoal_unique_id_t made;
        fuzz_assert(shoal_bootstrap_id_make(&root, secret, &made) == SHOAL_OK);
        shoal_sockaddr_t root2;
        uint8_t secret2[SHOAL_SECRET_BYTES];
        fuzz_assert(shoal_boot_id_parse(&made, &root2, secret2) == SHOAL_OK);
        fuzz_assert(memcmp(&root2, &root, sizeof(root)) == 0);
        fuzz_assert(memcmp(secret2, secret, sizeof(secret)) == 0);
    }

    shoal_sockaddr_t addr;
    if (shoal_bootstrap_addr_unpack(id.bytes, &addr) == SHOAL_OK)
        fuzz_check_addr(&addr);
    return 0;
}
