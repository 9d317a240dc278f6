/* Loading the device module (dev.h). */
#include "base/dev.h"

#include "base/config.h"
#include "base/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t dev_once = PTHREAD_ONCE_INIT;
static const shoal_dev_ops_t *_Atomic dev_ops;
static char dev_why[512];
static atomic_int dev_tried; /* dev_load ran: dev_why or dev_ops holds its outcome */

/* libshoal_cuda.so in the folder of the object that holds this code (the
 * shared library, or a program linked with the archive). */
static void module_beside(char *out, size_t cap)
{
    Dl_info info;
    const char *slash;
    if (dladdr((void *)module_beside, &info) && info.dli_fname &&
        (slash = strrchr(info.dli_fname, '/')))
        snprintf(out, cap, "%.*s/libshoal_cuda.so", (int)(slash - info.dli_fname),
                 info.dli_fname);
    else
        snprintf(out, cap, "libshoal_cuda.so");
}

static void dev_load(void)
{
    const shoal_cuda_config_t *cc = &shoal_config_get()->cuda;
    char path[SHOAL_CONFIG_STR_MAX + 32];
    if (cc->module[0])
        snprintf(path, sizeof(path), "%s", cc->module);
    else
        module_beside(path, sizeof(path));
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && !cc->module[0]) {
        /* Not beside libshoal: wherever the loader finds it. */
        snprintf(path, sizeof(path), "libshoal_cuda.so");
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        snprintf(dev_why, sizeof(dev_why),
                 "no CUDA module: cannot load %s (%s); shoal was built without CUDA, or the "
                 "module is not installed beside libshoal", path, dlerror());
        goto err;
    }
    shoal_dev_module_fn_t fn = (shoal_dev_module_fn_t)dlsym(h, SHOAL_DEV_MODULE_SYMBOL);
    const shoal_dev_ops_t *ops = fn ? fn() : NULL;
    if (!ops || ops->size < sizeof(*ops) || ops->abi != SHOAL_DEV_ABI) {
        snprintf(dev_why, sizeof(dev_why),
                 "the CUDA module %s is not one this libshoal can use (no %s, or another "
                 "version)", path, SHOAL_DEV_MODULE_SYMBOL);
        goto err_close;
    }
    if (ops->open(cc->driver, cc->cublas) != SHOAL_OK) {
        snprintf(dev_why, sizeof(dev_why), "CUDA is unavailable: %s", ops->why());
        goto err_close;
    }
    shoal_info(CUDA, "CUDA module %s: %d device(s) through %s", path, ops->device_count(),
               cc->driver);
    atomic_store_explicit(&dev_ops, ops, memory_order_release);
    atomic_store_explicit(&dev_tried, 1, memory_order_release);
    return;

err_close:
    /* The module stays loaded: it may have started threads of the driver's. */
err:
    shoal_info(CUDA, "%s", dev_why);
    atomic_store_explicit(&dev_tried, 1, memory_order_release);
}

const shoal_dev_ops_t *shoal_dev_get(void)
{
    pthread_once(&dev_once, dev_load);
    return atomic_load_explicit(&dev_ops, memory_order_acquire);
}

/* Never loads anything: a message must not make the process a CUDA one
 * (the doors decide that by whether the driver is loaded). */
const char *shoal_dev_why(void)
{
    if (!atomic_load_explicit(&dev_tried, memory_order_acquire)) {
        static _Thread_local char why[SHOAL_CONFIG_STR_MAX + 96];
        snprintf(why, sizeof(why), "this process has not loaded the CUDA driver (%s)",
                 shoal_config_get()->cuda.driver);
        return why;
    }
    return dev_why[0] ? dev_why : "CUDA is available";
}

const shoal_dev_ops_t *shoal_dev_loaded(void)
{
    return atomic_load_explicit(&dev_ops, memory_order_acquire);
}

const shoal_dev_ops_t *shoal_dev_if_driver(void)
{
    const shoal_dev_ops_t *ops = shoal_dev_loaded();
    if (ops)
        return ops;
    /* RTLD_NOLOAD: a handle only when the library is already loaded. */
    void *h = dlopen(shoal_config_get()->cuda.driver, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return NULL;
    dlclose(h);
    return shoal_dev_get();
}

shoal_dev_mem_t shoal_dev_kind(const void *p)
{
    const shoal_dev_ops_t *ops = shoal_dev_loaded();
    shoal_dev_mem_t kind = SHOAL_DEV_MEM_HOST;
    int dev;
    if (ops && p && ops->classify(p, &kind, &dev) != SHOAL_OK)
        kind = SHOAL_DEV_MEM_HOST;
    return kind;
}
