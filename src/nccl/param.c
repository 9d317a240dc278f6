/* NCCL 2.30's parameter API over shoal's settings (base/config.h): a
 * parameter is a setting, named by its SHOAL_ name or its NCCL alias
 * (NCCL_DEBUG for SHOAL_DEBUG...), and its value is the one the settings
 * hold (from the variable, the alias, or the default).
 *
 * A handle is the setting's table entry. Typed reads give the number
 * shoal uses: an int setting's int, a size's bytes, a time's nanoseconds,
 * a y/n setting's 1 or 0, an auto setting's number (base/config.h's
 * SHOAL_AUTO, SHOAL_ON, SHOAL_OFF), a log level's number, a subsystem mask; another setting whose text is a decimal integer, that
 * integer. A value that does not fit the type asked for, and a setting
 * that is not a number, are ncclInvalidArgument with the reason. The raw
 * read copies the number's bytes (as shoal holds it: int, size_t,
 * uint64_t or unsigned), or the text with its NUL. Strings returned stay
 * valid until the same call on the same thread. */
#include "door.h"

#include "base/config.h"
#include "base/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ncclParamHandle; /* never defined: a handle is a setting's entry */

static const shoal_config_entry_t *entry_of(ncclParamHandle_t h)
{
    const shoal_config_entry_t *e;
    for (size_t i = 0; (e = shoal_config_at(i)) != NULL; i++) {
        if ((const void *)e == (const void *)h)
            return e;
    }
    return NULL;
}

/* How shoal holds e's value: its bytes in the settings, or 0 for text. */
static size_t number_bytes(const shoal_config_entry_t *e)
{
    if (e->parse == shoal_config_field_int || e->parse == shoal_config_field_bool ||
        e->parse == shoal_config_field_auto || e->parse == shoal_config_field_level)
        return sizeof(int);
    if (e->parse == shoal_config_field_size)
        return sizeof(size_t);
    if (e->parse == shoal_config_field_time)
        return sizeof(uint64_t);
    if (e->parse == shoal_config_field_subsys)
        return sizeof(unsigned);
    return 0;
}

/* e's value as a signed or an unsigned 64-bit number (*neg: below 0). */
static ncclResult_t number_of(const shoal_config_entry_t *e, const char *what, int64_t *i_p,
                              uint64_t *u_p, int *neg_p)
{
    const char *field = (const char *)shoal_config_get() + e->offset;
    size_t bytes = number_bytes(e);
    *neg_p = 0;
    if (bytes == sizeof(int) && e->parse != shoal_config_field_subsys) {
        int x;
        memcpy(&x, field, sizeof(x));
        *i_p = x;
        *u_p = (uint64_t)(int64_t)x;
        *neg_p = x < 0;
        return ncclSuccess;
    }
    if (bytes) {
        /* unsigned (a mask), size_t or uint64_t, as number_bytes says. */
        uint64_t u = 0;
        unsigned mask;
        size_t z;
        if (bytes == sizeof(mask)) {
            memcpy(&mask, field, sizeof(mask));
            u = mask;
        } else if (e->parse == shoal_config_field_size) {
            memcpy(&z, field, sizeof(z));
            u = z;
        } else {
            memcpy(&u, field, sizeof(u));
        }
        *u_p = u;
        *i_p = (int64_t)u;
        return ncclSuccess;
    }
    char buf[SHOAL_CONFIG_STR_MAX], *end;
    shoal_config_text(e, buf);
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (!buf[0] || *end || errno)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "%s: %s is \"%s\", not a number (read it with ncclParamGetStr)",
                               what, e->name, buf);
    *i_p = v;
    *u_p = (uint64_t)v;
    *neg_p = v < 0;
    return ncclSuccess;
}

/* The typed reads: the value of h, if it lies in [lo, hi] (signed) or
 * [0, uhi] (unsigned). */
static ncclResult_t get_int(ncclParamHandle_t h, const char *what, int is_signed, int64_t lo,
                            int64_t hi, uint64_t uhi, int64_t *i_p, uint64_t *u_p)
{
    shoal_nccl_once();
    const shoal_config_entry_t *e = entry_of(h);
    if (!e)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "%s: %p is not a handle of ncclParamBind", what, (void *)h);
    int neg;
    ncclResult_t res = number_of(e, what, i_p, u_p, &neg);
    if (res != ncclSuccess)
        return res;
    int fits = is_signed ? (neg ? *i_p >= lo : *u_p <= (uint64_t)hi) : (!neg && *u_p <= uhi);
    if (!fits)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: %s is %s%" PRIu64
                               ", which does not fit", what, e->name, neg ? "-" : "",
                               neg ? (uint64_t)0 - *u_p : *u_p);
    return ncclSuccess;
}

/* ncclParamGet<type>: signed types take the signed value within [lo, hi],
 * unsigned ones the unsigned value up to uhi. */
#define PARAM_GET(name, type, is_signed, lo, hi, uhi)                                 \
    NCCL_API(ncclResult_t, name, ncclParamHandle_t h, type *out)                      \
    {                                                                                 \
        int64_t i;                                                                    \
        uint64_t u;                                                                   \
        if (!out)                                                                     \
            return shoal_nccl_fail(NULL, ncclInvalidArgument, #name ": out is NULL"); \
        ncclResult_t res = get_int(h, #name, is_signed, lo, hi, uhi, &i, &u);          \
        if (res == ncclSuccess)                                                       \
            *out = is_signed ? (type)i : (type)u;                                     \
        return res;                                                                   \
    }

PARAM_GET(ncclParamGetI8, int8_t, 1, INT8_MIN, INT8_MAX, 0)
PARAM_GET(ncclParamGetI16, int16_t, 1, INT16_MIN, INT16_MAX, 0)
PARAM_GET(ncclParamGetI32, int32_t, 1, INT32_MIN, INT32_MAX, 0)
PARAM_GET(ncclParamGetI64, int64_t, 1, INT64_MIN, INT64_MAX, 0)
PARAM_GET(ncclParamGetU8, uint8_t, 0, 0, 0, UINT8_MAX)
PARAM_GET(ncclParamGetU16, uint16_t, 0, 0, 0, UINT16_MAX)
PARAM_GET(ncclParamGetU32, uint32_t, 0, 0, 0, UINT32_MAX)
PARAM_GET(ncclParamGetU64, uint64_t, 0, 0, 0, UINT64_MAX)

NCCL_API(ncclResult_t, ncclParamBind, ncclParamHandle_t *out, const char *key)
{
    shoal_nccl_once();
    if (!out || !key)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "ncclParamBind: %s is NULL",
                               out ? "key" : "out");
    const shoal_config_entry_t *e = shoal_config_find(key);
    if (!e)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclParamBind: no parameter \"%s\" (shoal_info -c lists them, "
                               "with their NCCL names)", key);
    *out = (ncclParamHandle_t)(uintptr_t)e;
    return ncclSuccess;
}

static _Thread_local char str_buf[SHOAL_CONFIG_STR_MAX];
static _Thread_local char param_buf[SHOAL_CONFIG_STR_MAX];

NCCL_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t h, const char **out)
{
    shoal_nccl_once();
    const shoal_config_entry_t *e = entry_of(h);
    if (!e || !out)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "ncclParamGetStr: %s",
                               e ? "out is NULL" : "not a handle of ncclParamBind");
    *out = shoal_config_text(e, str_buf);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGet, ncclParamHandle_t h, void *out, int maxLen, int *len)
{
    shoal_nccl_once();
    const shoal_config_entry_t *e = entry_of(h);
    if (!e || !len || maxLen < 0 || (maxLen > 0 && !out))
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "ncclParamGet: %s",
                               !e ? "not a handle of ncclParamBind"
                                  : "len is NULL, maxLen negative, or out NULL");
    char text[SHOAL_CONFIG_STR_MAX];
    size_t bytes = number_bytes(e);
    const void *src = (const char *)shoal_config_get() + e->offset;
    if (!bytes) {
        src = shoal_config_text(e, text);
        bytes = strlen(text) + 1;
    }
    *len = (int)bytes;
    if ((size_t)maxLen < bytes)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclParamGet: %s takes %zu bytes, more than maxLen %d", e->name,
                               bytes, maxLen);
    memcpy(out, src, bytes);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetParameter, const char *key, const char **value,
         int *valueLen)
{
    shoal_nccl_once();
    if (!key || !value || !valueLen)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclParamGetParameter: key, value and valueLen must not be "
                               "NULL");
    const shoal_config_entry_t *e = shoal_config_find(key);
    if (!e)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclParamGetParameter: no parameter \"%s\"", key);
    *value = shoal_config_text(e, param_buf);
    *valueLen = (int)strlen(param_buf);
    return ncclSuccess;
}

/* Every setting's names: its SHOAL_ name, and its NCCL alias after it. */
static _Thread_local const char **key_table;

NCCL_API(ncclResult_t, ncclParamGetAllParameterKeys, const char ***table, int *tableLen)
{
    shoal_nccl_once();
    if (!table || !tableLen)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclParamGetAllParameterKeys: table and tableLen must not be "
                               "NULL");
    size_t n = shoal_config_count(), k = 0;
    const char **keys = realloc(key_table, (2 * n + 1) * sizeof(*keys));
    if (!keys)
        return shoal_nccl_fail(NULL, ncclSystemError, "ncclParamGetAllParameterKeys: out of "
                               "memory");
    key_table = keys;
    for (size_t i = 0; i < n; i++) {
        const shoal_config_entry_t *e = shoal_config_at(i);
        keys[k++] = e->name;
        if (e->nccl_name)
            keys[k++] = e->nccl_name;
    }
    keys[k] = NULL;
    *table = keys;
    *tableLen = (int)k;
    return ncclSuccess;
}

/* Every parameter to the log, at INFO: NCCL_DEBUG=INFO shows them. */
NCCL_API(void, ncclParamDumpAll, void)
{
    shoal_nccl_once();
    char buf[SHOAL_CONFIG_STR_MAX];
    const shoal_config_entry_t *e;
    for (size_t i = 0; (e = shoal_config_at(i)) != NULL; i++)
        shoal_info(INIT, "%s%s%s = \"%s\"", e->name, e->nccl_name ? " / " : "",
                   e->nccl_name ? e->nccl_name : "", shoal_config_text(e, buf));
}
