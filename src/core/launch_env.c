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
 * address, SHOAL_PORT, MASTER_PORT+1 or 29501) and the secret comes from
 * SHOAL_SECRET or, weaker, from the job's identity. */
#include "bootstrap.h"
#include "comm.h"
#include "base/config.h"
#include "launch.h"
#include "base/log.h"
#include "base/sock.h"

#include <errno.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
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

/* Variables that identify one job the same way on every rank; the derived
 * secret hashes those present. */
static const char *const shoal_launch_job_vars[] = {
    "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "OMPI_MCA_ess_base_jobid",
};

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

static shoal_status_t shoal_launch_sha256(const void *data, size_t len,
                                          uint8_t out[SHOAL_SECRET_BYTES])
{
    unsigned int outlen = 0;
    if (EVP_Digest(data, len, out, &outlen, EVP_sha256(), NULL) != 1 ||
        outlen != SHOAL_SECRET_BYTES)
        return shoal_comm_fail(NULL, SHOAL_ERR_INTERNAL, "shoal_comm_init_env: SHA-256 failed");
    return SHOAL_OK;
}

/* SHOAL_SECRET hashed, or else a hash of what every rank of this job sees
 * alike: the job id variables, the rendezvous address and the size. Anyone
 * who can read those (ps, the scheduler) can compute it, hence the log. */
static shoal_status_t shoal_launch_secret(const shoal_launch_t *l, const shoal_sockaddr_t *root,
                                          uint8_t secret[SHOAL_SECRET_BYTES])
{
    /* A size of -1 leaves it out (an id made before the size is known). */
    const char *text = shoal_config_get()->boot.secret;
    if (text[0])
        return shoal_launch_sha256(text, strlen(text), secret);

    char buf[4 * SHOAL_CONFIG_STR_MAX + 2 * SHOAL_SOCKADDR_STRLEN];
    char used[128] = "";
    size_t len = (size_t)snprintf(buf, sizeof(buf), "shoal-env-secret-1\n");
    for (size_t i = 0; i < sizeof(shoal_launch_job_vars) / sizeof(shoal_launch_job_vars[0]); i++) {
        const char *var = shoal_launch_job_vars[i];
        const char *val = shoal_config_env(var);
        if (!val)
            continue;
        if (strlen(val) >= SHOAL_CONFIG_STR_MAX)
            return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                                   "shoal_comm_init_env: %s is too long", var);
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s=%s\n", var, val);
        size_t ulen = strlen(used);
        snprintf(used + ulen, sizeof(used) - ulen, "%s%s", ulen ? ", " : "", var);
    }
    char addr[SHOAL_SOCKADDR_STRLEN];
    len += (size_t)snprintf(buf + len, sizeof(buf) - len, "addr=%s\n", shoal_sock_str(root, addr));
    if (l->size >= 0)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "size=%d\n", l->size);
    shoal_info(INIT,
               "env init: no SHOAL_SECRET; the connection secret is derived from the job "
               "identity (%s), the rendezvous address and the size, which others may guess: "
               "set SHOAL_SECRET to a private value shared by the ranks",
               used[0] ? used : "no job id variable found");
    shoal_status_t status = shoal_launch_sha256(buf, len, secret);
    OPENSSL_cleanse(buf, sizeof(buf));
    return status;
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

    uint8_t secret[SHOAL_SECRET_BYTES];
    shoal_unique_id_t id;
    status = shoal_launch_secret(l, &root, secret);
    if (status != SHOAL_OK)
        goto out_wipe;
    status = shoal_bootstrap_id_make(&root, secret, &id);
    if (status != SHOAL_OK)
        goto out_wipe;
    status = shoal_comm_init(l->size, &id, l->rank, comm_p);
out_wipe:
    OPENSSL_cleanse(secret, sizeof(secret));
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
    const shoal_launch_t anon = {.name = "address", .rank = -1, .size = -1, .local_rank = -1};
    uint8_t secret[SHOAL_SECRET_BYTES];
    status = shoal_launch_secret(&anon, &root, secret);
    if (status == SHOAL_OK)
        status = shoal_bootstrap_id_make(&root, secret, id_p);
    OPENSSL_cleanse(secret, sizeof(secret));
    return status;
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
