/* cuBLAS through dlopen, on first use (cublas_api.h). */
#include "cublas_api.h"
#include "cu_api.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define SHOAL_CUBLAS_DEFAULT "libcublas.so.13"

/* The library open named: kept as a copy, since the caller's string need
 * not outlive the call. A name too long to keep is remembered as such
 * and refused when gemm first needs the library, not by open, which
 * does not depend on cuBLAS. */
static char cublas_path[PATH_MAX] = SHOAL_CUBLAS_DEFAULT;
static int cublas_path_too_long;

static shoal_cublas_t cublas_table;
/* Published with release once every member is set; later calls read it
 * without the lock. */
static _Atomic(const shoal_cublas_t *) cublas_loaded;

/* The first load decides for the process, as open does for the driver:
 * its failure is kept and repeated on each later caller's thread. */
static pthread_mutex_t cublas_lock = PTHREAD_MUTEX_INITIALIZER;
static int cublas_done;
static char cublas_why[256];

/* As in cu_api.c: two steps, so that SHOAL_CUBLAS_NAME(cublasSgemm) is
 * "cublasSgemm_v2", the symbol cublas_v2.h's prototype refers to. */
#define SHOAL_CUBLAS_STR_(x) #x
#define SHOAL_CUBLAS_NAME(fn) SHOAL_CUBLAS_STR_(fn)

void shoal_cublas_set_path(const char *path)
{
    if (!path)
        path = SHOAL_CUBLAS_DEFAULT;
    if (strlen(path) >= sizeof(cublas_path)) {
        cublas_path_too_long = 1;
        return;
    }
    memcpy(cublas_path, path, strlen(path) + 1);
}

static int cublas_sym(void *lib, const char *name, void *fn_p)
{
    void *sym = dlsym(lib, name);
    if (!sym)
        return -1;
    memcpy(fn_p, &sym, sizeof(sym));
    return 0;
}

/* Under cublas_lock, once. */
static shoal_status_t cublas_load(void)
{
    const char *missing = NULL;

    if (cublas_path_too_long)
        return shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED,
                                "cannot load cuBLAS: its library's name is longer than %zu bytes",
                                sizeof(cublas_path) - 1);
    void *lib = dlopen(cublas_path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        return shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "cannot load %s (cuBLAS, for gemm): %s",
                                cublas_path, e ? e : "unknown error");
    }
#define SHOAL_CUBLAS_LOOKUP_(fn)                                                       \
    if (cublas_sym(lib, SHOAL_CUBLAS_NAME(fn), &cublas_table.fn) != 0 && !missing)     \
        missing = SHOAL_CUBLAS_NAME(fn);
    SHOAL_CUBLAS_FUNCS(SHOAL_CUBLAS_LOOKUP_)
#undef SHOAL_CUBLAS_LOOKUP_
    if (missing) {
        shoal_status_t st = shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED,
                                             "%s lacks %s (it is not cuBLAS, or an older one)",
                                             cublas_path, missing);
        memset(&cublas_table, 0, sizeof(cublas_table));
        dlclose(lib);
        return st;
    }
    atomic_store_explicit(&cublas_loaded, &cublas_table, memory_order_release);
    return SHOAL_OK;
}

shoal_status_t shoal_cublas_get(const shoal_cublas_t **cb_p)
{
    const shoal_cublas_t *cb = atomic_load_explicit(&cublas_loaded, memory_order_acquire);
    shoal_status_t st = SHOAL_OK;

    if (!cb) {
        pthread_mutex_lock(&cublas_lock);
        if (!cublas_done) {
            st = cublas_load();
            cublas_done = 1;
            if (st != SHOAL_OK)
                snprintf(cublas_why, sizeof(cublas_why), "%s", shoal_cuda_why());
        }
        cb = atomic_load_explicit(&cublas_loaded, memory_order_relaxed);
        if (!cb)
            st = shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "%s", cublas_why);
        pthread_mutex_unlock(&cublas_lock);
        if (st != SHOAL_OK)
            return st;
    }
    *cb_p = cb;
    return SHOAL_OK;
}

/* cublasStatus_t's values as cublas_api.h lists them, with what each
 * means: the module does not ask the library (cublasGetStatusName), so
 * that the names are there whatever failed. */
static const char *cublas_status_name(cublasStatus_t s, const char **text_p)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: *text_p = "success"; return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        *text_p = "the library was not initialised";
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        *text_p = "resource allocation failed";
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        *text_p = "an invalid value was passed";
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        *text_p = "the device lacks a feature the call needs";
        return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
        *text_p = "GPU memory could not be reached";
        return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        *text_p = "the GPU program failed to run";
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        *text_p = "an internal operation failed";
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        *text_p = "the functionality is not supported";
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
        *text_p = "a licence check failed";
        return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    *text_p = "unknown status";
    return NULL;
}

shoal_status_t shoal_cublas_fail(const char *fn, cublasStatus_t s)
{
    const char *text;
    const char *name = cublas_status_name(s, &text);
    shoal_status_t st;

    switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED: st = SHOAL_ERR_NO_MEMORY; break;
    case CUBLAS_STATUS_INVALID_VALUE: st = SHOAL_ERR_INVALID_ARG; break;
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_LICENSE_ERROR: st = SHOAL_ERR_UNSUPPORTED; break;
    default: st = SHOAL_ERR_SYSTEM; break;
    }
    if (name)
        return shoal_cuda_failf(st, "%s: %s (%s)", fn, text, name);
    return shoal_cuda_failf(st, "%s: cuBLAS status %d", fn, (int)s);
}
