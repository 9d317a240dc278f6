/* The kernels' fat binary (kernels.cu, built by nvcc into the file that
 * SHOAL_CUDA_FATBIN names) inside the module itself, so that the module is
 * one file and cuModuleLoadData reads the image from memory: no path to
 * find at run time, and no way to pair the module with another build's
 * kernels. cuda.mk makes this object depend on the fat binary, since the
 * compiler's dependency lists do not see .incbin. */
#include <stddef.h>

#ifndef SHOAL_CUDA_FATBIN
#error "SHOAL_CUDA_FATBIN must name the fat binary to embed (src/cuda/cuda.mk sets it)"
#endif

/* The size below is an 8-byte word. */
_Static_assert(sizeof(size_t) == 8, "shoal_cuda_fatbin_size is emitted as a .quad");

/* shoal_cuda_fatbin and shoal_cuda_fatbin_size (module.h) in .rodata,
 * which is neither writable nor executable ("a": allocated only). The
 * driver reads the image's header through 8-byte fields, hence the
 * alignment. The size is the distance between two labels, which the
 * assembler computes, so it is always the file's size. Hidden: the
 * symbols stay inside the module whatever its version script says. The
 * compiler still marks this object's stack non-executable
 * (.note.GNU-stack), as for any C file. */
__asm__(".pushsection .rodata,\"a\",%progbits\n"
        ".balign 8\n"
        ".globl shoal_cuda_fatbin\n"
        ".hidden shoal_cuda_fatbin\n"
        ".type shoal_cuda_fatbin, %object\n"
        "shoal_cuda_fatbin:\n"
        ".incbin \"" SHOAL_CUDA_FATBIN "\"\n"
        ".Lshoal_cuda_fatbin_end:\n"
        ".size shoal_cuda_fatbin, .Lshoal_cuda_fatbin_end - shoal_cuda_fatbin\n"
        ".balign 8\n"
        ".globl shoal_cuda_fatbin_size\n"
        ".hidden shoal_cuda_fatbin_size\n"
        ".type shoal_cuda_fatbin_size, %object\n"
        "shoal_cuda_fatbin_size:\n"
        ".quad .Lshoal_cuda_fatbin_end - shoal_cuda_fatbin\n"
        ".size shoal_cuda_fatbin_size, 8\n"
        ".popsection\n");
