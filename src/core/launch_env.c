/* shoal_comm_init_env: recognise the launcher from its environment and form
 * the communicator without the caller passing an id around.
 *
 * Order, first match wins:
 *   1. SHOAL_RANK + SHOAL_SIZE (explicit settings)
 *   2. PMIx (PMIX_NAMESPACE or PMIX_RANK): the id travels through PMIx
 *   3. torchrun: RANK + WORLD_SIZE
 *   4. Open MPI without PMIx: OMPI_COMM_WORLD_RANK + OMPI_COMM_WORLD_SIZE
 *   5. Slurm: SLURM_PROCID + SLURM_NTASKS
 * Except for PMIx, every rank builds the same id on its own: rank 0 listens
 * on the rendezvous address (SHOAL_ADDR, else MASTER_ADDR; port from the
 * address, SHOAL_PORT, MASTER_PORT+1 or 29501) and the secret comes from a
 * passphrase every rank holds (launch_secret.c). */
#include "bootstrap.h"
#include "comm.h"
#include "base/config.h"
#include "launch.h"
#include "base/log.h"
#include "base/sock.h"

#include <errno.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHOAL_LAUNCH_DEFAULT_PORT 29501

/* A launcher recognised by its rank and size variables. */
typedef struct {
    const char *name;
    const char *rank_var;
    const char *size_var;
    const char *local_var;
} shoal_launch_vars_t;

static const shoal_launch_vars_t shoal_launch_table[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

#define SHOAL_LAUNCH_COUNT (sizeof(shoal_launch_table) / sizeof(shoal_launch_table[0]))

typedef struct {
    const char *name;
    int rank;
    int size;
    int local_rank; /* -1 when the launcher does not say */
} shoal_launch_t;

/* Strict decimal in [min, max]; anything else is a launcher we cannot trust. */
static shoal_status_t shoal_launch_parse_int(const char *var, const char *text, long min,
                                             long max, int *out_p)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno || v < min || v > max)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "shoal_comm_init_env: %s=\"%s\" is not an integer in %ld..%ld",
                               var, text, min, max);
    *out_p = (int)v;
    return SHOAL_OK;
}

static shoal_status_t shoal_launch_check_ranks(const shoal_launch_t *l, const char *rank_var,
                                               const char *size_var)
{
    if (l->size < 1 || l->rank < 0 || l->rank >= l->size)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "shoal_comm_init_env: %s: %s=%d does not fit %s=%d", l->name,
                               rank_var, l->rank, size_var, l->size);
    if (l->local_rank >= l->size)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "shoal_comm_init_env: %s: local rank %d does not fit size %d",
                               l->name, l->local_rank, l->size);
    return SHOAL_OK;
}

/* SHOAL_RANK/SHOAL_SIZE: config already parsed them (-1 = unset). */
static shoal_status_t shoal_launch_from_settings(shoal_launch_t *l, int *found_p)
{
    const shoal_boot_config_t *boot = &shoal_config_get()->boot;
    *found_p = boot->rank != -1 || boot->size != -1;
    if (!*found_p)
        return SHOAL_OK;
    if (boot->rank == -1 || boot->size == -1)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "shoal_comm_init_env: %s is set but %s is not (both or neither)",
                               boot->rank != -1 ? "SHOAL_RANK" : "SHOAL_SIZE",
                               boot->rank != -1 ? "SHOAL_SIZE" : "SHOAL_RANK");
    l->name = "SHOAL_RANK/SHOAL_SIZE";
    l->rank = boot->rank;
    l->size = boot->size;
    l->local_rank = boot->local_rank;
    return shoal_launch_check_ranks(l, "SHOAL_RANK", "SHOAL_SIZE");
}

/* torchrun, Open MPI or Slurm: the first whose rank or size variable exists.
 * Finding one of the two without the other is an error, not a reason to look
 * further: a half-set launcher means the environment is not what it seems. */
static shoal_status_t shoal_launch_from_table(shoal_launch_t *l, int *found_p)
{
    for (size_t i = 0; i < SHOAL_LAUNCH_COUNT; i++) {
        const shoal_launch_vars_t *v = &shoal_launch_table[i];
        const char *rank = shoal_config_env(v->rank_var);
        const char *size = shoal_config_env(v->size_var);
        if (!rank && !size)
            continue;
        *found_p = 1;
        if (!rank || !size)
            return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                                   "shoal_comm_init_env: %s: %s is set but %s is not",
                                   v->name, rank ? v->rank_var : v->size_var,
                                   rank ? v->size_var : v->rank_var);
        l->name = v->name;
        shoal_status_t status = shoal_launch_parse_int(v->rank_var, rank, 0, INT_MAX, &l->rank);
        if (status == SHOAL_OK)
            status = shoal_launch_parse_int(v->size_var, size, 1, INT_MAX, &l->size);
        if (status != SHOAL_OK)
            return status;
        const char *local = shoal_config_env(v->local_var);
        l->local_rank = -1;
        if (local) {
            status = shoal_launch_parse_int(v->local_var, local, 0, INT_MAX, &l->local_rank);
            if (status != SHOAL_OK)
                return status;
        }
        return shoal_launch_check_ranks(l, v->rank_var, v->size_var);
    }
    *found_p = 0;
    return SHOAL_OK;
}

/* Rendezvous address of rank 0. The port is the one written in SHOAL_ADDR,
 * else SHOAL_PORT, else MASTER_PORT+1 (torchrun's own store already holds
 * MASTER_PORT), else 29501. */
static shoal_status_t shoal_launch_root_addr(shoal_sockaddr_t *root_p)
{
    const shoal_boot_config_t *boot = &shoal_config_get()->boot;
    const char *text = boot->addr[0] ? boot->addr : shoal_config_env("MASTER_ADDR");
    const char *text_var = boot->addr[0] ? "SHOAL_ADDR" : "MASTER_ADDR";
    if (!text)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "shoal_comm_init_env: no rendezvous address: set SHOAL_ADDR "
                               "(host[:port]) or MASTER_ADDR");
    if (boot->port < 0 || boot->port > 65535)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "shoal_comm_init_env: SHOAL_PORT=%d is not a port", boot->port);

    int port = SHOAL_LAUNCH_DEFAULT_PORT;
    const char *master_port = shoal_config_env("MASTER_PORT");
    if (boot->port > 0) {
        port = boot->port;
    } else if (master_port) {
        int mp;
        shoal_status_t status = shoal_launch_parse_int("MASTER_PORT", master_port, 1, 65534, &mp);
        if (status != SHOAL_OK)
            return status;
        port = mp + 1;
    }

    shoal_sockaddr_t root;
    shoal_status_t status = shoal_sock_resolve(text, port, &root);
    if (status != SHOAL_OK)
        return shoal_comm_fail(NULL, status, "shoal_comm_init_env: cannot resolve %s=\"%s\"",
                               text_var, text);
    uint16_t got = shoal_sock_port(&root);
    if (boot->port > 0 && got != boot->port)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "shoal_comm_init_env: %s=\"%s\" names port %u but SHOAL_PORT=%d",
                               text_var, text, (unsigned)got, boot->port);
    if (got == 0)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "shoal_comm_init_env: %s=\"%s\" names port 0, which the other "
                               "ranks cannot find", text_var, text);
    *root_p = root;
    return SHOAL_OK;
}

/* The launchers that know no PMIx: every rank builds the same id. */
static shoal_status_t shoal_launch_join(const shoal_launch_t *l, shoal_comm_t *comm_p)
{
    shoal_sockaddr_t root;
    shoal_status_t status = shoal_launch_root_addr(&root);
    if (status != SHOAL_OK)
        return status;

    char addr[SHOAL_SOCKADDR_STRLEN];
    shoal_info(INIT, "env init: launcher %s, rank %d of %d (local rank %d), rendezvous %s",
               l->name, l->rank, l->size, l->local_rank, shoal_sock_str(&root, addr));

    shoal_unique_id_t id;
    const shoal_launch_job_t job = {.launcher = l->name, .rank = l->rank, .size = l->size,
                                    .root = &root};
    status = shoal_launch_make_id(&job, &id);
    if (status == SHOAL_OK)
        status = shoal_comm_init(l->size, &id, l->rank, comm_p);
    OPENSSL_cleanse(&id, sizeof(id));
    return status;
}

shoal_status_t shoal_launch_id_for(const char *hostport, shoal_unique_id_t *id_p)
{
    shoal_sockaddr_t root;
    shoal_status_t status = shoal_sock_resolve(hostport, 0, &root);
    if (status != SHOAL_OK)
        return shoal_comm_fail(NULL, status, "cannot resolve rendezvous address \"%s\"",
                               hostport);
    if (shoal_sock_port(&root) == 0)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "rendezvous address \"%s\" names no port", hostport);
    const shoal_launch_job_t job = {.launcher = "NCCL_COMM_ID", .rank = -1, .size = -1,
                                    .root = &root};
    return shoal_launch_make_id(&job, id_p);
}

shoal_status_t shoal_comm_init_env(shoal_comm_t *comm_p)
{
    if (!comm_p)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG, "shoal_comm_init_env: comm_p is NULL");

    shoal_launch_t l = {.name = NULL, .rank = -1, .size = -1, .local_rank = -1};
    int found = 0;
    shoal_status_t status = shoal_launch_from_settings(&l, &found);
    if (status != SHOAL_OK)
        return status;
    if (found)
        return shoal_launch_join(&l, comm_p);

    if (shoal_launch_pmix_present()) {
        status = shoal_launch_pmix_init(comm_p);
        if (status != SHOAL_ERR_UNSUPPORTED)
            return status;
    }

    status = shoal_launch_from_table(&l, &found);
    if (status != SHOAL_OK)
        return status;
    if (found)
        return shoal_launch_join(&l, comm_p);

    return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                           "shoal_comm_init_env: no launcher found; looked for SHOAL_RANK + "
                           "SHOAL_SIZE, PMIX_NAMESPACE or PMIX_RANK (PMIx), RANK + WORLD_SIZE "
                           "(torchrun), OMPI_COMM_WORLD_RANK + OMPI_COMM_WORLD_SIZE (Open MPI), "
                           "SLURM_PROCID + SLURM_NTASKS (Slurm)");
}
