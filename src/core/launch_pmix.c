/* shoal_comm_init_env under a PMIx launcher (mpirun, srun --mpi=pmix,
 * prterun). PMIx gives rank and size, and its key-value store carries the
 * unique id from rank 0 to the others, so no address or secret has to be
 * agreed on in advance and the id keeps its random secret. */
#include "base/config.h"
#include "launch.h"
#include "base/log.h"

#include <pmix.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int shoal_launch_pmix_present(void)
{
    return shoal_config_env("PMIX_NAMESPACE") != NULL || shoal_config_env("PMIX_RANK") != NULL;
}

/* The store outlives one exchange: a second shoal_comm_init_env in the same
 * job must not read the first id, so each call uses its own key. Every rank
 * makes the same sequence of calls, hence the same keys. */
static void shoal_launch_pmix_key(char key[PMIX_MAX_KEYLEN + 1])
{
    static unsigned calls;
    snprintf(key, PMIX_MAX_KEYLEN + 1, "shoal.unique_id.%u", calls++);
}

/* Blocking PMIx calls take a limit in whole seconds; SHOAL_TIMEOUT applies. */
static int shoal_launch_pmix_timeout_s(void)
{
    uint64_t s = (shoal_config_get()->core.timeout_ns + 999999999ull) / 1000000000ull;
    return s < 1 ? 1 : s > 1000000 ? 1000000 : (int)s;
}

static shoal_status_t shoal_launch_pmix_job_size(const pmix_proc_t *me, int *size_p)
{
    pmix_proc_t job;
    pmix_value_t *val = NULL;
    PMIX_LOAD_PROCID(&job, me->nspace, PMIX_RANK_WILDCARD);
    pmix_status_t rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS) {
        shoal_error(INIT, "PMIx_Get(%s): %s", PMIX_JOB_SIZE, PMIx_Error_string(rc));
        return SHOAL_ERR_SYSTEM;
    }
    shoal_status_t status = SHOAL_OK;
    if (val->type == PMIX_UINT32 && val->data.uint32 >= 1 && val->data.uint32 <= INT32_MAX) {
        *size_p = (int)val->data.uint32;
    } else {
        shoal_error(INIT, "PMIx_Get(%s) gave an unusable value (type %d)", PMIX_JOB_SIZE,
                    (int)val->type);
        status = SHOAL_ERR_SYSTEM;
    }
    PMIX_VALUE_RELEASE(val);
    return status;
}

/* Rank 0 publishes its id; everyone fences with data collection, then the
 * others read rank 0's entry. */
static shoal_status_t shoal_launch_pmix_exchange(const pmix_proc_t *me, shoal_unique_id_t *id)
{
    char key[PMIX_MAX_KEYLEN + 1];
    shoal_launch_pmix_key(key);
    pmix_status_t rc;
    if (me->rank == 0) {
        pmix_value_t val;
        memset(&val, 0, sizeof(val));
        val.type = PMIX_BYTE_OBJECT;
        val.data.bo.bytes = (char *)id->bytes;
        val.data.bo.size = sizeof(id->bytes);
        rc = PMIx_Put(PMIX_GLOBAL, key, &val);
        if (rc != PMIX_SUCCESS) {
            shoal_error(INIT, "PMIx_Put(%s): %s", key, PMIx_Error_string(rc));
            return SHOAL_ERR_SYSTEM;
        }
        rc = PMIx_Commit();
        if (rc != PMIX_SUCCESS) {
            shoal_error(INIT, "PMIx_Commit: %s", PMIx_Error_string(rc));
            return SHOAL_ERR_SYSTEM;
        }
    }

    bool collect = true;
    int timeout_s = shoal_launch_pmix_timeout_s();
    pmix_info_t info[2];
    memset(info, 0, sizeof(info));
    PMIx_Info_load(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIx_Info_load(&info[1], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
    rc = PMIx_Fence(NULL, 0, info, 2);
    if (rc != PMIX_SUCCESS) {
        shoal_error(INIT, "PMIx_Fence: %s", PMIx_Error_string(rc));
        return rc == PMIX_ERR_TIMEOUT ? SHOAL_ERR_TIMEOUT : SHOAL_ERR_SYSTEM;
    }
    if (me->rank == 0)
        return SHOAL_OK;

    pmix_proc_t root;
    pmix_value_t *val = NULL;
    PMIX_LOAD_PROCID(&root, me->nspace, 0);
    rc = PMIx_Get(&root, key, &info[1], 1, &val);
    if (rc != PMIX_SUCCESS) {
        shoal_error(INIT, "PMIx_Get(%s) from rank 0: %s", key, PMIx_Error_string(rc));
        return rc == PMIX_ERR_TIMEOUT ? SHOAL_ERR_TIMEOUT : SHOAL_ERR_SYSTEM;
    }
    shoal_status_t status = SHOAL_OK;
    if (val->type == PMIX_BYTE_OBJECT && val->data.bo.size == sizeof(id->bytes)) {
        memcpy(id->bytes, val->data.bo.bytes, sizeof(id->bytes));
    } else {
        shoal_error(INIT, "PMIx_Get(%s) from rank 0 gave no unique id (type %d)", key,
                    (int)val->type);
        status = SHOAL_ERR_SYSTEM;
    }
    PMIX_VALUE_RELEASE(val);
    return status;
}

shoal_status_t shoal_launch_pmix_init(shoal_comm_t *comm_p)
{
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        shoal_warn(INIT, "PMIx_Init: %s; trying the other launchers", PMIx_Error_string(rc));
        return SHOAL_ERR_UNSUPPORTED;
    }

    int size = 0;
    shoal_status_t status = shoal_launch_pmix_job_size(&me, &size);
    if (status != SHOAL_OK)
        goto err_finalize;
    if (me.rank >= (pmix_rank_t)size) {
        shoal_error(INIT, "PMIx rank %u is outside the job size %d", me.rank, size);
        status = SHOAL_ERR_SYSTEM;
        goto err_finalize;
    }
    int rank = (int)me.rank;
    shoal_info(INIT, "env init: launcher PMIx (namespace %s), rank %d of %d", me.nspace, rank,
               size);

    shoal_unique_id_t id;
    memset(&id, 0, sizeof(id));
    if (rank == 0) {
        status = shoal_get_unique_id(&id);
        /* The others wait in the fence for rank 0's data: rank 0 still has
         * to join it, with nothing published, so they fail fast instead of
         * waiting for the whole PMIx timeout. */
        if (status != SHOAL_OK) {
            PMIx_Fence(NULL, 0, NULL, 0);
            goto err_finalize;
        }
    }
    status = shoal_launch_pmix_exchange(&me, &id);
    if (status != SHOAL_OK)
        goto err_finalize;

    /* The id is all shoal needs from PMIx; the communicator's own network
     * does the rest, so PMIx is released before the (possibly long) init. */
    rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS)
        shoal_warn(INIT, "PMIx_Finalize: %s", PMIx_Error_string(rc));
    return shoal_comm_init(size, &id, rank, comm_p);

err_finalize:
    PMIx_Finalize(NULL, 0);
    return status;
}
