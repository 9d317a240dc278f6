/* The CUDA driver through dlopen (cu_api.h). */
#include "cu_api.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* The message of dev_ops.h's why(): one per thread, so concurrent
 * failures on different threads keep their own causes. */
#define SHOAL_CUDA_WHY_BYTES 256
static _Thread_local char why_buf[SHOAL_CUDA_WHY_BYTES];

static shoal_cu_t cu_table;
/* Published with release once every member is set, so that a thread that
 * sees the pointer sees the whole table. */
static _Atomic(const shoal_cu_t *) cu_loaded;

/* The kernels are SASS for the architectures the build names and PTX of
 * the newest; both need a driver of at least the toolkit's major version,
 * which is what runs code of that toolkit. */
#define SHOAL_CU_DRIVER_MIN (CUDA_VERSION / 1000 * 1000)

/* Two steps, so that the argument is macro-expanded before it is made a
 * string: SHOAL_CU_NAME(cuMemAlloc) is "cuMemAlloc_v2", the symbol that
 * cuda.h's prototype of cuMemAlloc refers to. */
#define SHOAL_CU_STR_(x) #x
#define SHOAL_CU_NAME(fn) SHOAL_CU_STR_(fn)

const char *shoal_cuda_why(void)
{
    return why_buf;
}

/* Formatted aside first, so that a message may quote the thread's
 * previous one (shoal_cuda_why() as an argument) to add its context. */
shoal_status_t shoal_cuda_failf(shoal_status_t status, const char *fmt, ...)
{
    char msg[SHOAL_CUDA_WHY_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    memcpy(why_buf, msg, sizeof(why_buf));
    return status;
}

/* Which shoal status a driver error stands for: the caller's mistakes,
 * missing capabilities and exhausted memory each have their own; anything
 * else is the driver's or the device's failure. */
static shoal_status_t cu_status(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return SHOAL_ERR_NO_MEMORY;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE: return SHOAL_ERR_INVALID_ARG;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: return SHOAL_ERR_UNSUPPORTED;
    default: return SHOAL_ERR_SYSTEM;
    }
}

shoal_status_t shoal_cu_fail(const char *fn, CUresult r)
{
    const shoal_cu_t *cu = shoal_cu();
    const char *text = NULL, *name = NULL;
    /* The table may be partly loaded (cuInit failing during load): the
     * two lookups are then asked only if they were found. */
    const shoal_cu_t *t = cu ? cu : &cu_table;
    if (t->cuGetErrorString && t->cuGetErrorString(r, &text) != CUDA_SUCCESS)
        text = NULL;
    if (t->cuGetErrorName && t->cuGetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (name)
        return shoal_cuda_failf(cu_status(r), "%s: %s (%s)", fn, text ? text : "error", name);
    return shoal_cuda_failf(cu_status(r), "%s: CUDA error %d", fn, (int)r);
}

const shoal_cu_t *shoal_cu(void)
{
    return atomic_load_explicit(&cu_loaded, memory_order_acquire);
}

/* dlsym's result into a function pointer: the two have one size on every
 * platform that has dlsym, which POSIX relies on. */
static int cu_sym(void *lib, const char *name, void *fn_p)
{
    void *sym = dlsym(lib, name);
    if (!sym)
        return -1;
    memcpy(fn_p, &sym, sizeof(sym));
    return 0;
}

shoal_status_t shoal_cu_load(const char *driver, const shoal_cu_t **cu_p, int *count_p)
{
    const char *path = driver ? driver : "libcuda.so.1";
    const char *missing = NULL;
    shoal_status_t st;
    int version = 0, count = 0;
    CUresult r;

    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        return shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "cannot load %s: %s", path,
                                e ? e : "unknown error");
    }
    /* Look up every function before failing, so the message names the
     * first one missing in list order, whatever the table's layout. */
#define SHOAL_CU_LOOKUP_(fn)                                                           \
    if (cu_sym(lib, SHOAL_CU_NAME(fn), &cu_table.fn) != 0 && !missing)                 \
        missing = SHOAL_CU_NAME(fn);
    SHOAL_CU_FUNCS(SHOAL_CU_LOOKUP_)
#undef SHOAL_CU_LOOKUP_
    if (missing) {
        st = shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED,
                              "driver lacks %s (%s is not a CUDA driver, or an older one)",
                              missing, path);
        goto err_close_lib;
    }

    r = cu_table.cuInit(0);
    if (r != CUDA_SUCCESS) {
        st = shoal_cu_fail("cuInit", r);
        goto err_close_lib;
    }
    r = cu_table.cuDriverGetVersion(&version);
    if (r != CUDA_SUCCESS) {
        st = shoal_cu_fail("cuDriverGetVersion", r);
        goto err_close_lib;
    }
    if (version < SHOAL_CU_DRIVER_MIN) {
        st = shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED,
                              "driver too old: %s runs CUDA %d.%d, the kernels need %d.%d or newer",
                              path, version / 1000, version % 1000 / 10,
                              SHOAL_CU_DRIVER_MIN / 1000, SHOAL_CU_DRIVER_MIN % 1000 / 10);
        goto err_close_lib;
    }
    r = cu_table.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS) {
        st = shoal_cu_fail("cuDeviceGetCount", r);
        goto err_close_lib;
    }
    if (count < 1) {
        st = shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "no CUDA device");
        goto err_close_lib;
    }

    atomic_store_explicit(&cu_loaded, &cu_table, memory_order_release);
    *cu_p = &cu_table;
    *count_p = count;
    return SHOAL_OK;

err_close_lib:
    /* The message is already in the thread's buffer, so the driver's
     * strings it quotes may go with the library. */
    memset(&cu_table, 0, sizeof(cu_table));
    dlclose(lib);
    return st;
}
