/* The secret of an id that every rank of a job builds on its own:
 * shoal_comm_init_env without PMIx (SHOAL_RANK/SIZE, torchrun, Open MPI,
 * Slurm) and NCCL_COMM_ID. No channel carries it, so it must come from
 * something every rank already holds, and only shoal's ranks should:
 *
 *   1. a passphrase, from SHOAL_SECRET_FILE (a file that only its owner may
 *      read or write) or SHOAL_SECRET. It goes through scrypt (N = 2^15,
 *      r = 8, p = 1: about 32 MiB and a tenth of a second) with a salt that
 *      every rank computes alike from the job's identity: the job id
 *      variables, the rendezvous address and the size. A handshake sends
 *      its nonces and proofs in clear, so whoever captures one may guess
 *      passphrases offline; the salt makes that work per job (no table
 *      computed in advance serves), and scrypt makes each guess cost what
 *      one rank's init costs. A long random passphrase is out of reach; a
 *      word from a dictionary is not.
 *   2. otherwise nothing: the job's identity is public (ps, /proc, the
 *      scheduler), and torchrun's store at MASTER_ADDR accepts anyone, so
 *      no channel that all ranks trust exists. SHOAL_AUTH=strict (the
 *      default) refuses; warn derives the secret from the identity with
 *      one warning on rank 0; off does the same without it.
 *
 * The salt travels in the id (bootstrap.h), so that a rank refused at join
 * can say how its secret was made. Ids from shoal_get_unique_id, and PMIx
 * launches, keep their random secret and pass through none of this. */
#include "bootstrap.h"
#include "comm.h"
#include "launch.h"
#include "base/config.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* scrypt's cost: N, r, p, and the memory it may take (128 r N bytes and a
 * little more). */
#define SHOAL_KDF_N (1ull << 15)
#define SHOAL_KDF_R 8ull
#define SHOAL_KDF_P 1ull
#define SHOAL_KDF_MAXMEM (64ull << 20)

/* The longest passphrase a secret file may hold. */
#define SHOAL_SECRET_FILE_MAX 4096

/* Variables that identify one job the same way on every rank. */
static const char *const shoal_launch_job_vars[] = {
    "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "OMPI_MCA_ess_base_jobid",
};

static shoal_status_t shoal_launch_sha256(const void *data, size_t len,
                                          uint8_t out[SHOAL_SECRET_BYTES])
{
    unsigned int outlen = 0;
    if (EVP_Digest(data, len, out, &outlen, EVP_sha256(), NULL) != 1 ||
        outlen != SHOAL_SECRET_BYTES)
        return shoal_comm_fail(NULL, SHOAL_ERR_INTERNAL, "env init: SHA-256 failed");
    return SHOAL_OK;
}

/* "VAR=value\n" for each job id variable present, the address and the
 * size (left out when -1: an id made before the size is known); used
 * lists the variables found. */
static shoal_status_t shoal_launch_identity(const shoal_launch_job_t *job, char *buf,
                                            size_t cap, size_t *len_p, char *used,
                                            size_t used_cap)
{
    size_t len = 0;
    used[0] = '\0';
    for (size_t i = 0; i < sizeof(shoal_launch_job_vars) / sizeof(shoal_launch_job_vars[0]); i++) {
        const char *var = shoal_launch_job_vars[i];
        const char *val = shoal_config_env(var);
        if (!val)
            continue;
        if (strlen(val) >= SHOAL_CONFIG_STR_MAX)
            return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG, "env init: %s is too long", var);
        len += (size_t)snprintf(buf + len, cap - len, "%s=%s\n", var, val);
        size_t ulen = strlen(used);
        snprintf(used + ulen, used_cap - ulen, "%s%s", ulen ? ", " : "", var);
    }
    char addr[SHOAL_SOCKADDR_STRLEN];
    len += (size_t)snprintf(buf + len, cap - len, "addr=%s\n", shoal_sock_str(job->root, addr));
    if (job->size >= 0)
        len += (size_t)snprintf(buf + len, cap - len, "size=%d\n", job->size);
    *len_p = len;
    return SHOAL_OK;
}

/* The passphrase of SHOAL_SECRET_FILE, without its line ending, into pass
 * (SHOAL_SECRET_FILE_MAX + 2 bytes); refused when others may read or
 * write the file. */
static shoal_status_t shoal_launch_read_file(const char *path, char *pass, size_t *len_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG, "SHOAL_SECRET_FILE=%s: %s", path,
                               strerror(errno));
    shoal_status_t s = SHOAL_OK;
    struct stat st;
    /* The mode of the file opened, not of the path: it cannot change
     * between the look and the read. */
    if (fstat(fd, &st) != 0) {
        s = shoal_comm_fail(NULL, SHOAL_ERR_SYSTEM, "SHOAL_SECRET_FILE=%s: fstat: %s", path,
                            strerror(errno));
        goto out_close;
    }
    if (!S_ISREG(st.st_mode)) {
        s = shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                            "SHOAL_SECRET_FILE=%s is not a regular file", path);
        goto out_close;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        s = shoal_comm_fail(NULL, SHOAL_ERR_AUTH,
                            "SHOAL_SECRET_FILE=%s: mode %04o lets users other than its owner "
                            "read or write it, so it is no secret: chmod 600 %s (and choose a "
                            "new passphrase if others may have read it)",
                            path, (unsigned)(st.st_mode & 07777), path);
        goto out_close;
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, pass + len, SHOAL_SECRET_FILE_MAX + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            s = shoal_comm_fail(NULL, SHOAL_ERR_SYSTEM, "SHOAL_SECRET_FILE=%s: read: %s", path,
                                strerror(errno));
            goto out_close;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > SHOAL_SECRET_FILE_MAX) {
            s = shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                                "SHOAL_SECRET_FILE=%s holds more than %d bytes", path,
                                SHOAL_SECRET_FILE_MAX);
            goto out_close;
        }
    }
    while (len > 0 && (pass[len - 1] == '\n' || pass[len - 1] == '\r'))
        len--;
    if (len == 0) {
        s = shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG, "SHOAL_SECRET_FILE=%s is empty", path);
        goto out_close;
    }
    *len_p = len;
out_close:
    close(fd);
    return s;
}

/* secret = scrypt(passphrase, salt). */
static shoal_status_t shoal_launch_kdf(const char *pass, size_t len,
                                       const uint8_t salt[SHOAL_SALT_BYTES],
                                       uint8_t secret[SHOAL_SECRET_BYTES])
{
    if (EVP_PBE_scrypt(pass, len, salt, SHOAL_SALT_BYTES, SHOAL_KDF_N, SHOAL_KDF_R, SHOAL_KDF_P,
                       SHOAL_KDF_MAXMEM, secret, SHOAL_SECRET_BYTES) != 1)
        return shoal_comm_fail(NULL, SHOAL_ERR_SYSTEM, "env init: scrypt: %s",
                               ERR_reason_error_string(ERR_get_error()));
    return SHOAL_OK;
}

/* Init fails in strict mode: say why, and how to give a secret. */
static shoal_status_t shoal_launch_refuse(const shoal_launch_job_t *job)
{
    int torchrun = !strcmp(job->launcher, "torchrun");
    return shoal_comm_fail(
        NULL, SHOAL_ERR_AUTH,
        "%s: no secret that only this job knows: set SHOAL_SECRET_FILE to a file that only "
        "you can read (chmod 600) holding a passphrase every rank shares, or SHOAL_SECRET, or "
        "launch under PMIx (mpirun, srun --mpi=pmix), which carries a random secret%s. "
        "SHOAL_AUTH=warn accepts a secret derived from the job's identity (job id, rendezvous "
        "address, size), which anyone who can read the launch variables can compute",
        job->launcher,
        torchrun ? "; torchrun offers no channel that only the ranks can read (its store at "
                   "MASTER_ADDR accepts anyone)"
                 : "");
}

shoal_status_t shoal_launch_make_id(const shoal_launch_job_t *job, shoal_unique_id_t *id_p)
{
    const shoal_boot_config_t *boot = &shoal_config_get()->boot;
    char ident[4 * SHOAL_CONFIG_STR_MAX + 2 * SHOAL_SOCKADDR_STRLEN];
    char pass[SHOAL_SECRET_FILE_MAX + 2];
    char used[128];
    uint8_t salt_full[SHOAL_SECRET_BYTES], secret[SHOAL_SECRET_BYTES];
    shoal_unique_id_t id;
    size_t ilen = 0, plen = 0;
    shoal_secret_origin_t origin = SHOAL_SECRET_PASSPHRASE;

    if (boot->secret[0] && boot->secret_file[0])
        return shoal_comm_fail(NULL, SHOAL_ERR_INVALID_ARG,
                               "%s: both SHOAL_SECRET and SHOAL_SECRET_FILE are set; set one",
                               job->launcher);
    shoal_status_t s = shoal_launch_identity(job, ident, sizeof(ident), &ilen, used,
                                             sizeof(used));
    if (s != SHOAL_OK)
        goto out_wipe;
    if (boot->secret_file[0]) {
        s = shoal_launch_read_file(boot->secret_file, pass, &plen);
    } else if (boot->secret[0]) {
        plen = strlen(boot->secret);
        memcpy(pass, boot->secret, plen);
    } else {
        origin = SHOAL_SECRET_JOB;
        if (boot->auth == SHOAL_AUTH_STRICT)
            s = shoal_launch_refuse(job);
    }
    if (s != SHOAL_OK)
        goto out_wipe;

    /* The salt: the job's identity under a label of its own, so that it
     * never equals the derived secret below. */
    static const char salt_label[] = "shoal-salt-1\n";
    char salted[sizeof(salt_label) + sizeof(ident)];
    memcpy(salted, salt_label, sizeof(salt_label) - 1);
    memcpy(salted + sizeof(salt_label) - 1, ident, ilen);
    s = shoal_launch_sha256(salted, sizeof(salt_label) - 1 + ilen, salt_full);
    if (s != SHOAL_OK)
        goto out_wipe;

    if (origin == SHOAL_SECRET_PASSPHRASE) {
        s = shoal_launch_kdf(pass, plen, salt_full, secret);
    } else {
        /* The secret is the identity's hash: a slow function would not
         * help, everything it is made of being public. */
        static const char label[] = "shoal-env-secret-1\n";
        char buf[sizeof(label) + sizeof(ident)];
        memcpy(buf, label, sizeof(label) - 1);
        memcpy(buf + sizeof(label) - 1, ident, ilen);
        s = shoal_launch_sha256(buf, sizeof(label) - 1 + ilen, secret);
        OPENSSL_cleanse(buf, sizeof(buf));
        /* rank -1: an id for NCCL_COMM_ID, whose rank is not known yet. */
        if (s == SHOAL_OK && boot->auth == SHOAL_AUTH_WARN && job->rank <= 0)
            shoal_warn(INIT,
                       "%s: SHOAL_AUTH=warn and no SHOAL_SECRET_FILE, SHOAL_SECRET or PMIx: "
                       "the connection secret is derived from the job's identity (%s, the "
                       "rendezvous address, the size), which anyone who can read those (ps, "
                       "/proc, the scheduler) can compute, and so join this job, read and "
                       "change its data; set SHOAL_SECRET_FILE to stop this",
                       job->launcher, used[0] ? used : "no job id variable found");
        else if (s == SHOAL_OK)
            shoal_info(INIT, "%s: SHOAL_AUTH=off: the connection secret is derived from the "
                       "job's identity (%s, the rendezvous address, the size)", job->launcher,
                       used[0] ? used : "no job id variable found");
    }
    if (s != SHOAL_OK)
        goto out_wipe;
    s = shoal_bootstrap_id_make(job->root, secret, &id);
    if (s != SHOAL_OK)
        goto out_wipe;
    shoal_bootstrap_id_set_origin(&id, origin, salt_full);
    *id_p = id;
out_wipe:
    OPENSSL_cleanse(pass, sizeof(pass));
    OPENSSL_cleanse(secret, sizeof(secret));
    OPENSSL_cleanse(&id, sizeof(id));
    return s;
}
