/* RDMA devices and ports (transport/ib_dev.c) and the name lists of
 * SHOAL_IB_HCA (base/namelist.c):
 * - lists in NCCL's syntax: prefixes, "=" exact names, "^" exclusions,
 *   ":port";
 * - the GID entry of a RoCE port from a sysfs tree written here: the
 *   RoCE v2 entry of an IPv4 address wherever it sits, else the first
 *   RoCE v2 one, else none; SHOAL_IB_GID_INDEX forces one;
 * - the live machine: with SHOAL_TEST_RXE=1 (the RDMA guest of
 *   tests/rdma, after rxe_setup.sh) rxe0 and rxe1 are found active, as
 *   RoCE, with the GID index sysfs gives (RXE_GID0, RXE_GID1) and their
 *   IPv4 addresses, and SHOAL_IB_HCA selects among them; elsewhere the
 *   list may be empty, and then says why. */
#include "harness.h"

#include "base/namelist.h"
#include "transport/ib_dev.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_namelist(void **state)
{
    (void)state;
    assert_true(shoal_namelist_selects("", "mlx5_0", 1));
    assert_true(shoal_namelist_selects("mlx5", "mlx5_0", 1));
    assert_true(shoal_namelist_selects("mlx5", "mlx5_12", 2));
    assert_false(shoal_namelist_selects("=mlx5", "mlx5_0", 1));
    assert_true(shoal_namelist_selects("=mlx5_0", "mlx5_0", 1));
    assert_false(shoal_namelist_selects("=mlx5_0", "mlx5_01", 1));
    /* Ports. */
    assert_true(shoal_namelist_selects("mlx5_0:1,mlx5_1", "mlx5_0", 1));
    assert_false(shoal_namelist_selects("mlx5_0:1,mlx5_1", "mlx5_0", 2));
    assert_true(shoal_namelist_selects("mlx5_0:1,mlx5_1", "mlx5_1", 2));
    assert_false(shoal_namelist_selects("mlx5_0:x", "mlx5_0", 1));
    /* Exclusions. */
    assert_false(shoal_namelist_selects("^mlx5_2", "mlx5_2", 1));
    assert_true(shoal_namelist_selects("^mlx5_2", "mlx5_1", 1));
    assert_false(shoal_namelist_selects("^=rxe0:1", "rxe0", 1));
    assert_true(shoal_namelist_selects("^=rxe0:1", "rxe0", 2));
    assert_true(shoal_namelist_selects("^=rxe0", "rxe01", 1));
    /* Mixed exactness; names without ports keep their colons. */
    assert_true(shoal_namelist_selects("eth,=ib0", "ib0", 0));
    assert_false(shoal_namelist_selects("eth,=ib0", "ib01", 0));
    assert_true(shoal_namelist_selects("=eth0:1", "eth0:1", 0));
}

/* A sysfs tree under dir: device dev, port 1, entries of (type, gid). */
static void write_entry(const char *dir, int i, const char *type, const char *gid)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/class/infiniband/dev/ports/1/gid_attrs/types/%d", dir, i);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", type);
    fclose(f);
    snprintf(path, sizeof(path), "%s/class/infiniband/dev/ports/1/gids/%d", dir, i);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", gid);
    fclose(f);
}

static char *make_tree(void)
{
    char *dir = strdup("/tmp/shoal-sysfs-XXXXXX");
    assert_non_null(dir);
    assert_non_null(mkdtemp(dir));
    const char *sub[] = {"/class", "/class/infiniband", "/class/infiniband/dev",
                         "/class/infiniband/dev/ports", "/class/infiniband/dev/ports/1",
                         "/class/infiniband/dev/ports/1/gids",
                         "/class/infiniband/dev/ports/1/gid_attrs",
                         "/class/infiniband/dev/ports/1/gid_attrs/types"};
    for (size_t k = 0; k < sizeof(sub) / sizeof(sub[0]); k++) {
        char path[512];
        snprintf(path, sizeof(path), "%s%s", dir, sub[k]);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    return dir;
}

static void remove_tree(char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

#define LINK_LOCAL "fe80:0000:0000:0000:5054:00ff:fe12:3456"
#define V4(x) "0000:0000:0000:0000:0000:ffff:0ae8:000" x
#define V6 "fd00:0000:0000:0000:0000:0000:0000:0001"

static void test_pick_gid(void **state)
{
    (void)state;
    char type[SHOAL_IB_GID_TYPE_MAX];
    char *dir = make_tree();
    /* Entries 0-1: link-local v1 and v2; 2-3: IPv4 v1 and v2; 4 unused;
     * 5: IPv6 v2. */
    write_entry(dir, 0, "IB/RoCE v1", LINK_LOCAL);
    write_entry(dir, 1, "RoCE v2", LINK_LOCAL);
    write_entry(dir, 2, "IB/RoCE v1", V4("1"));
    write_entry(dir, 3, "RoCE v2", V4("1"));
    write_entry(dir, 5, "RoCE v2", V6);
    assert_int_equal(shoal_ib_pick_gid(dir, "dev", 1, 8, -1, type, sizeof(type)), 3);
    assert_string_equal(type, "RoCE v2");
    /* Forced: that entry, whatever its type; an unused or absent one: none. */
    assert_int_equal(shoal_ib_pick_gid(dir, "dev", 1, 8, 2, type, sizeof(type)), 2);
    assert_string_equal(type, "IB/RoCE v1");
    assert_int_equal(shoal_ib_pick_gid(dir, "dev", 1, 8, 4, type, sizeof(type)), -1);
    assert_int_equal(shoal_ib_pick_gid(dir, "dev", 1, 8, 9, type, sizeof(type)), -1);
    /* The table's length bounds the search: without entry 3, the first
     * RoCE v2 entry. */
    assert_int_equal(shoal_ib_pick_gid(dir, "dev", 1, 3, -1, type, sizeof(type)), 1);
    assert_string_equal(type, "RoCE v2");
    /* No RoCE v2 entry at all: none. */
    assert_int_equal(shoal_ib_pick_gid(dir, "dev", 1, 1, -1, type, sizeof(type)), -1);
    assert_string_equal(type, "");
    /* Another device or port: nothing there. */
    assert_int_equal(shoal_ib_pick_gid(dir, "dev", 2, 8, -1, type, sizeof(type)), -1);
    assert_int_equal(shoal_ib_pick_gid(dir, "other", 1, 8, -1, type, sizeof(type)), -1);
    remove_tree(dir);
}

/* The port of dev in list, or NULL. */
static const shoal_ib_port_t *port_of(const shoal_ib_list_t *list, const char *dev)
{
    for (int i = 0; i < list->nports; i++) {
        if (!strcmp(list->ports[i].dev, dev))
            return &list->ports[i];
    }
    return NULL;
}

static void check_rxe(const shoal_ib_list_t *list, const char *dev, const char *addr,
                      const char *gid_env)
{
    const shoal_ib_port_t *p = port_of(list, dev);
    assert_non_null(p);
    assert_int_equal(p->port, 1);
    assert_int_equal(p->link, SHOAL_IB_LINK_ETH);
    assert_true(p->mtu >= 256);
    const char *want = getenv(gid_env);
    assert_non_null(want);
    assert_int_equal(p->gid_index, atoi(want));
    assert_string_equal(p->gid_type, "RoCE v2");
    char text[INET6_ADDRSTRLEN], mapped[64];
    assert_non_null(inet_ntop(AF_INET6, p->gid, text, sizeof(text)));
    snprintf(mapped, sizeof(mapped), "::ffff:%s", addr);
    assert_string_equal(text, mapped);
}

static void test_live(void **state)
{
    (void)state;
    shoal_ib_list_t list;
    if (!getenv("SHOAL_TEST_RXE") || strcmp(getenv("SHOAL_TEST_RXE"), "1")) {
        /* This machine: whatever it has, an empty list says why. */
        assert_int_equal(shoal_ib_ports_find(&list), SHOAL_OK);
        if (list.nports == 0)
            assert_true(strlen(list.why) > 0);
        shoal_ib_ports_print(&list, stdout);
        shoal_ib_ports_free(&list);
        return;
    }
    assert_int_equal(shoal_ib_ports_find(&list), SHOAL_OK);
    shoal_ib_ports_print(&list, stdout);
    check_rxe(&list, "rxe0", "10.232.0.1", "RXE_GID0");
    check_rxe(&list, "rxe1", "10.232.0.2", "RXE_GID1");
    shoal_ib_ports_free(&list);
    /* SHOAL_IB_HCA chooses. */
    harness_setenv("SHOAL_IB_HCA", "=rxe1");
    assert_int_equal(shoal_ib_ports_find(&list), SHOAL_OK);
    assert_int_equal(list.nports, 1);
    assert_string_equal(list.ports[0].dev, "rxe1");
    shoal_ib_ports_free(&list);
    harness_setenv("SHOAL_IB_HCA", "^rxe1");
    assert_int_equal(shoal_ib_ports_find(&list), SHOAL_OK);
    assert_null(port_of(&list, "rxe1"));
    assert_non_null(port_of(&list, "rxe0"));
    shoal_ib_ports_free(&list);
    harness_setenv("SHOAL_IB_HCA", "rxe:2");
    assert_int_equal(shoal_ib_ports_find(&list), SHOAL_OK);
    assert_int_equal(list.nports, 0);
    assert_non_null(strstr(list.why, "SHOAL_IB_HCA"));
    shoal_ib_ports_free(&list);
    /* SHOAL_IB_GID_INDEX forces the entry. */
    harness_setenv("SHOAL_IB_HCA", "=rxe0");
    harness_setenv("SHOAL_IB_GID_INDEX", "0");
    assert_int_equal(shoal_ib_ports_find(&list), SHOAL_OK);
    assert_int_equal(list.nports, 1);
    assert_int_equal(list.ports[0].gid_index, 0);
    shoal_ib_ports_free(&list);
    harness_setenv("SHOAL_IB_HCA", NULL);
    harness_setenv("SHOAL_IB_GID_INDEX", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_namelist),
        cmocka_unit_test(test_pick_gid),
        cmocka_unit_test(test_live),
    };
    return cmocka_run_group_tests_name("ib_dev", tests, NULL, NULL);
}
