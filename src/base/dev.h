/* The device module, seen from libshoal: loaded with dlopen the first time
 * a caller needs it (a device pointer, a stream), so that libshoal builds,
 * runs and tests without CUDA. The table itself is dev_ops.h. */
#ifndef SHOAL_DEV_H
#define SHOAL_DEV_H

#include "base/dev_ops.h"

/* The module's table, loaded and opened on first use (SHOAL_CUDA_MODULE,
 * SHOAL_CUDA_DRIVER). NULL when there is none: no module built or found,
 * no driver, no device; shoal_dev_why() then says which, in a sentence
 * that names the file or the driver's words. Thread-safe; the outcome of
 * the first call stands for the process. */
const shoal_dev_ops_t *shoal_dev_get(void);
/* Why there is no table: the outcome of the load, or, before any load was
 * tried, that the process has not loaded the driver. Loads nothing. */
const char *shoal_dev_why(void);

/* The table if an earlier shoal_dev_get loaded it, else NULL: for callers
 * that must not load the module on their own (host-only paths checking
 * whether a pointer could be a device's). */
const shoal_dev_ops_t *shoal_dev_loaded(void);

/* The table when this process already uses the CUDA driver (the driver
 * library is loaded, by the application or an earlier call), loading the
 * module on the first such call; NULL, with nothing loaded, otherwise.
 * What a door calls to learn whether a pointer could be a device's. */
const shoal_dev_ops_t *shoal_dev_if_driver(void);

/* Kind of the memory at p: SHOAL_DEV_MEM_HOST when no module is loaded (only
 * a module can know device memory). */
shoal_dev_mem_t shoal_dev_kind(const void *p);

/* The host may read and write memory of this kind. */
static inline int shoal_dev_host_access(shoal_dev_mem_t kind)
{
    return kind != SHOAL_DEV_MEM_DEVICE;
}

#endif
