/* shoal's nccl.h against NVIDIA's: nccl_abi_gen.h, generated from the
 * vendor header by tests/nccl_abi_gen.sh, holds its enum values, macro
 * values and types, struct sizes, field offsets and types, and every
 * prototype. Most of it is checked while this file compiles (a difference
 * is a compile error that names it); what C can only compare at run time
 * (floating, string and null-pointer macros, the *_INITIALIZER fields) is
 * checked by the one test below. nccl.h is compiled without any CUDA
 * header, as a program built for host memory would.
 *
 * The build generates nccl_abi_gen.h only where the vendor header is
 * installed ($(CUDA_HOME)/include/nccl.h); elsewhere the test is skipped. */
#include "nccl.h"

#if defined(__has_include)
#if __has_include("nccl_abi_gen.h")
#include "nccl_abi_gen.h"
#define SHOAL_NCCL_ABI_GENERATED 1
#endif
#endif

#include "harness.h"

#include <stdio.h>

#ifdef SHOAL_NCCL_ABI_GENERATED
static void test_nccl_abi(void **state)
{
    int failures = shoal_nccl_abi_check_values();
    if (failures)
        fail_msg("%d value(s) of nccl.h differ from NCCL's (listed above)", failures);
}
#endif

int main(void)
{
#ifndef SHOAL_NCCL_ABI_GENERATED
    /* TAP for "nothing to run", which prove counts as skipped. */
    printf("1..0 # SKIP no nccl_abi_gen.h: no vendor nccl.h to compare with\n");
    return 0;
#else
    const struct CMUnitTest tests[] = {
        {.name = "nccl.h matches the vendor's ABI", .test_func = test_nccl_abi},
    };
    return cmocka_run_group_tests_name("nccl_abi", tests, NULL, NULL);
#endif
}
