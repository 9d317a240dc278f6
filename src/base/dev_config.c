/* The device module's settings ([cuda], shoal_config_get()->cuda). */
#include "base/config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const shoal_config_entry_t cuda_entries[] = {
    {.name = "SHOAL_CUDA_MODULE", .def = "",
     .doc = "the CUDA module libshoal loads at its first device pointer or stream: a path, or "
            "a file name for the loader's search; empty: libshoal_cuda.so beside libshoal",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(cuda.module)},
    {.name = "SHOAL_CUDA_DRIVER", .def = "libcuda.so.1",
     .doc = "the CUDA driver library the module loads (tests name a CPU stand-in of it)",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(cuda.driver)},
    {.name = "SHOAL_CUBLAS", .def = "libcublas.so.13",
     .doc = "the cuBLAS library the module loads for PowerSGD's products on device tensors "
            "(tests name a CPU stand-in of it)",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(cuda.cublas)},
    {.name = "SHOAL_CUDA_STAGE_MAX", .def = "256M",
     .doc = "pinned host memory a communicator keeps for staging device buffers between "
            "operations (more is allocated while needed and given back)",
     .parse = shoal_config_field_size, .offset = SHOAL_CONFIG_FIELD(cuda.stage_max)},
    {.name = "SHOAL_CUDA_PATH", .def = "auto",
     .doc = "device buffers of ranks on one host: auto (device to device where the cost "
            "model finds it cheaper and every rank can open its peers' memory, else staged "
            "through host memory), staged (always), direct (device to device wherever every "
            "rank can)",
     .parse = shoal_config_field_string, .offset = SHOAL_CONFIG_FIELD(cuda.path)},
};

static void cuda_sanitize(shoal_config_t *c)
{
    if (strcmp(c->cuda.path, "auto") && strcmp(c->cuda.path, "staged") &&
        strcmp(c->cuda.path, "direct"))
        snprintf(c->cuda.path, sizeof(c->cuda.path), "auto");
}

SHOAL_CONFIG_TABLE(cuda, 8, cuda_entries, cuda_sanitize);
