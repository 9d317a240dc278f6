#!/bin/bash
# The CUDA module as built (src/cuda/cuda.mk): its fat binary holds SASS
# for every architecture of CUDA_ARCHS and PTX for the newest, which the
# driver compiles for GPUs newer than the list; $BUILD/libshoal_cuda.so
# exports shoal_cuda_module and nothing else, and reaches the driver and
# cuBLAS only through dlopen (no cu* or cublas* symbol left for the dynamic
# linker and neither library needed, so the module loads where there is no
# driver and no cuBLAS); and the table it returns is the one
# src/base/dev_ops.h describes, with no empty slot, whose open names the
# cause when the driver library is missing.
#
# Needs no GPU and no driver. Without nvcc nothing is built: a developer
# gets a skip, CI (SHOAL_CI=1) a failure. The fat binary is read with
# cuobjdump where the toolkit has it, else by its container headers
# (fatbin_images below), which is all the listing needs.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
CC=${CC:-cc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# cuda.mk's default list; its last entry also gets PTX.
CUDA_ARCHS=${CUDA_ARCHS:-80 90 100}
FATBIN=$BUILD/src/cuda/kernels.fatbin
MODULE=$BUILD/libshoal_cuda.so

# shellcheck source=tests/tap.sh
. tests/tap.sh

if [ -x "$CUDA_HOME/bin/nvcc" ]; then
    CUOBJDUMP=$CUDA_HOME/bin/cuobjdump
elif command -v nvcc >/dev/null 2>&1; then
    CUOBJDUMP=$(dirname "$(command -v nvcc)")/cuobjdump
else
    missing_all "no nvcc (CUDA toolkit) in $CUDA_HOME/bin or on the PATH: the module is not built"
fi
if ! command -v nm >/dev/null 2>&1 || ! command -v readelf >/dev/null 2>&1; then
    missing_all "nm or readelf (binutils) is missing"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_cuda_build.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# fatbin_images FILE KIND: the architecture number of each image of KIND
# (elf or ptx) in the fat binary FILE, one a line. cuobjdump names images
# like k.1.sm_80.cubin; without it, the container is read directly: a
# 16-byte header (magic 0xba55ed50, version, header size, payload bytes),
# then images, each a header (kind 1 = PTX, 2 = ELF, at 0; its own size at
# 4; payload bytes at 8; architecture at 28) and its payload.
fatbin_images() {
    if [ -x "$CUOBJDUMP" ]; then
        "$CUOBJDUMP" "--list-$2" "$1" | grep -oE '(sm|compute)_[0-9]+' | sed 's/.*_//'
        return "${PIPESTATUS[0]}"
    fi
    python3 - "$1" "$2" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
want = {"ptx": 1, "elf": 2}[sys.argv[2]]
magic, _, head, size = struct.unpack_from("<IHHQ", data, 0)
if magic != 0xBA55ED50:
    sys.exit("%s: not a fat binary (magic %#x)" % (sys.argv[1], magic))
off, end = head, head + size
while off < end:
    kind, _, ihead, isize = struct.unpack_from("<HHIQ", data, off)
    (arch,) = struct.unpack_from("<I", data, off + 28)
    if kind == want:
        print(arch)
    off += ihead + isize
EOF
}

newest=${CUDA_ARCHS##* }
echo "1..5"

if [ ! -r "$FATBIN" ]; then
    fail "$FATBIN was built (make builds it where nvcc is)"
    fail "$FATBIN holds compute_$newest PTX"
elif ! [ -x "$CUOBJDUMP" ] && ! command -v python3 >/dev/null 2>&1; then
    missing "the fat binary's images" "neither cuobjdump nor python3 to read them"
    missing "the fat binary's PTX" "neither cuobjdump nor python3 to read it"
else
    fatbin_images "$FATBIN" elf >"$TMP/elf" 2>"$TMP/elf.err"
    wanted=
    lacking=
    for a in $CUDA_ARCHS; do
        wanted="$wanted sm_$a"
        grep -qx "$a" "$TMP/elf" || lacking="$lacking sm_$a"
    done
    if [ -s "$TMP/elf" ] && [ -z "$lacking" ]; then
        pass "$FATBIN holds SASS for$wanted"
    else
        fail "$FATBIN holds SASS for$wanted (lacks:${lacking:- all})"
        show "$TMP/elf.err"
    fi
    fatbin_images "$FATBIN" ptx >"$TMP/ptx" 2>"$TMP/ptx.err"
    if grep -qx "$newest" "$TMP/ptx"; then
        pass "$FATBIN holds compute_$newest PTX"
    else
        fail "$FATBIN holds compute_$newest PTX"
        show "$TMP/ptx.err"
    fi
fi

LINKER_TITLE="$MODULE leaves no driver or cuBLAS symbol to the dynamic linker and needs neither library"
if [ ! -r "$MODULE" ]; then
    fail "$MODULE was built (make builds it where nvcc is)"
    fail "$LINKER_TITLE"
else
    # Every defined dynamic symbol, whatever its type: only the entry
    # point may be there, as a function.
    if nm -D --defined-only "$MODULE" >"$TMP/nm" 2>&1; then
        awk '{ print $2, $3 }' "$TMP/nm" >"$TMP/defined"
    else
        cp "$TMP/nm" "$TMP/defined"
    fi
    if [ "$(cat "$TMP/defined")" = "T shoal_cuda_module" ]; then
        pass "$MODULE exports shoal_cuda_module and nothing else"
    else
        fail "$MODULE exports shoal_cuda_module and nothing else"
        show "$TMP/defined"
    fi
    # cu[A-Z]: the driver's functions (cuMemAlloc_v2); cublas: cuBLAS's.
    if ! nm -D --undefined-only "$MODULE" >"$TMP/nm" 2>&1; then
        fail "$LINKER_TITLE"
        show "$TMP/nm"
    elif awk '{ print $NF }' "$TMP/nm" | grep -E '^cu([A-Z]|blas)' >"$TMP/driver"; then
        fail "$LINKER_TITLE"
        show "$TMP/driver"
    elif readelf -d "$MODULE" 2>&1 | grep -E 'NEEDED.*\[lib(cuda|cublas)' >"$TMP/driver"; then
        fail "$LINKER_TITLE"
        show "$TMP/driver"
    else
        pass "$LINKER_TITLE"
    fi
fi

# The table through dlopen, as libshoal finds it: size and ABI of this
# tree's header, the name, every slot filled, and open's message when the
# driver library is not there.
cat >"$TMP/table.c" <<'EOF'
#include "base/dev_ops.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    shoal_dev_module_fn_t fn;
    void *sym;
    if (argc != 3 || !lib) {
        printf("dlopen: %s\n", lib ? "usage" : dlerror());
        return 1;
    }
    sym = dlsym(lib, SHOAL_DEV_MODULE_SYMBOL);
    if (!sym) {
        printf("no %s\n", SHOAL_DEV_MODULE_SYMBOL);
        return 1;
    }
    memcpy(&fn, &sym, sizeof(fn));
    const shoal_dev_ops_t *ops = fn();
    if (ops->size != sizeof(*ops) || ops->abi != SHOAL_DEV_ABI || strcmp(ops->name, "cuda")) {
        printf("size %zu (want %zu), abi %u (want %u), name %s\n", ops->size, sizeof(*ops),
               ops->abi, SHOAL_DEV_ABI, ops->name);
        return 1;
    }
#define SLOT(x) if (!ops->x) { printf("slot %s is NULL\n", #x); return 1; }
    SLOT(why) SLOT(open) SLOT(device_count) SLOT(classify) SLOT(device_of) SLOT(extent)
    SLOT(mem_alloc) SLOT(mem_free) SLOT(host_alloc) SLOT(host_free) SLOT(copy) SLOT(reduce)
    SLOT(avg) SLOT(convert) SLOT(flag_write) SLOT(flag_wait) SLOT(stream_create)
    SLOT(stream_destroy) SLOT(stream_sync) SLOT(ipc_get) SLOT(ipc_open) SLOT(ipc_close)
    SLOT(gemm) SLOT(codec)
    shoal_status_t st = ops->open(argv[2], NULL);
    printf("open: %d: %s\n", (int)st, ops->why());
    return st == SHOAL_ERR_UNSUPPORTED && strstr(ops->why(), "cannot load") ? 0 : 1;
}
EOF
# A sanitizer build's module needs its runtime loaded first: the check is
# built with the sanitizer the module links (its leak check off: the
# module stays loaded on purpose).
SAN=
if [ -r "$MODULE" ]; then
    needed=$(readelf -d "$MODULE" 2>/dev/null)
    case $needed in *libasan*) SAN=-fsanitize=address ;; esac
    case $needed in *libubsan*) SAN="${SAN:+$SAN,undefined}" ;; esac
    case $needed in *libtsan*) SAN=-fsanitize=thread ;; esac
fi
if [ ! -r "$MODULE" ]; then
    fail "$MODULE returns its table through dlopen"
elif ! $CC -std=c11 -D_GNU_SOURCE ${SAN:+"$SAN"} -Iinclude -Isrc -o "$TMP/table" "$TMP/table.c" -ldl \
    >"$TMP/table.out" 2>&1; then
    fail "the table check compiles with $CC"
    show "$TMP/table.out"
elif ASAN_OPTIONS=detect_leaks=0 $LIMIT "$TMP/table" "$MODULE" "$TMP/no-such-libcuda.so.1" \
    >"$TMP/table.out" 2>&1; then
    pass "$MODULE returns a full table; open without a driver says it cannot load it"
else
    fail "$MODULE returns a full table; open without a driver says it cannot load it"
    show "$TMP/table.out"
fi
