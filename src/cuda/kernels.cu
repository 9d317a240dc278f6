/* The CUDA module's kernels (kern.h). Each is a thin grid-stride wrapper
 * around the range function that the CPU stand-in of the driver also runs,
 * so the device computes exactly what the tests check on the host. The
 * names are C names (extern "C") because the module finds them by string
 * with cuModuleGetFunction; each takes its kern.h struct by value, as the
 * module passes it as cuLaunchKernel's one parameter. */
#include "cuda/kern.h"

/* Thread t of the grid takes elements t, t + G, t + 2G, ... where G is the
 * number of threads in the grid, so any grid size covers any count. */
extern "C" __global__ void shoal_k_reduce(shoal_k_reduce_t k)
{
    uint64_t begin = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    shoal_k_reduce_range(&k, begin, k.count, stride);
}

extern "C" __global__ void shoal_k_avg(shoal_k_avg_t k)
{
    uint64_t begin = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    shoal_k_avg_range(&k, begin, k.count, stride);
}

extern "C" __global__ void shoal_k_convert(shoal_k_convert_t k)
{
    uint64_t begin = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    shoal_k_convert_range(&k, begin, k.count, stride);
}

/* Holds the stream until the host's release store makes the flag reach
 * value (compared with wrap-around, as cuStreamWaitValue32's GEQ). The
 * volatile load rereads host memory on every turn; the short sleep keeps
 * the spinning thread from hogging its SM's issue slots and the PCIe link.
 * The system-scope fence after the wait orders the later work of the
 * stream after the host's writes that preceded its store to the flag. */
extern "C" __global__ void shoal_k_wait(shoal_k_wait_t k)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    while ((int32_t)(*k.flag - k.value) < 0)
        __nanosleep(100);
    __threadfence_system();
}

/* Raises the flag for the host once the stream's earlier work is done
 * (the kernel starts only then); the fence makes that work's writes
 * visible to the host before the flag is. */
extern "C" __global__ void shoal_k_write(shoal_k_wait_t k)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    __threadfence_system();
    *k.flag = k.value;
}

/* One thread per unit of the run (kern.h's shoal_k_codec_units): thread t
 * takes units t, t + G, ... as the element kernels take elements. */
extern "C" __global__ void shoal_k_codec(shoal_k_codec_t k)
{
    uint64_t begin = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    shoal_k_codec_range(&k, begin, shoal_k_codec_units(&k), stride);
}

/* One thread per tensor (kern.h's shoal_k_ortho_range). */
extern "C" __global__ void shoal_k_ortho(shoal_k_ortho_t k)
{
    uint64_t begin = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    shoal_k_ortho_range(&k, begin, k.ntensors, stride);
}
