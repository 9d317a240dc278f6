/* The extension as one translation unit. Each part stands alone (it
 * includes what it uses, and compiles by itself), but each would parse
 * torch's headers (ATen's, through ProcessGroup.hpp) again: compiled
 * apart, the four parts took 48 s of CPU, compiled as one 19 s. */
#include "types.cpp"
#include "work.cpp"
#include "process_group.cpp"
#include "module.cpp"
