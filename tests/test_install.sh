#!/bin/bash
# make install gives headers, libraries and shoal.pc that a program can build
# against; the shared library exports only the public API and runs a 2-rank
# all-reduce through it.
set -u
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
n=0
check() {
    local what=$1
    shift
    n=$((n + 1))
    if "$@" >"$TMP/check.out" 2>&1; then
        echo "ok $n - $what"
    else
        echo "not ok $n - $what"
        sed 's/^/# /' "$TMP/check.out"
    fi
}
echo "1..7"
check "make install PREFIX=tmp" make -s install PREFIX="$TMP/prefix"
cat >"$TMP/prog.c" <<'PROG'
#include <shoal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void)
{
    shoal_unique_id_t id;
    if (shoal_get_unique_id(&id) != SHOAL_OK)
        return 2;
    pid_t pid = fork();
    int rank = pid == 0;
    shoal_comm_t comm;
    if (shoal_comm_init(2, &id, rank, &comm) != SHOAL_OK)
        return 3;
    double x[3] = {rank + 1.0, 2.0, -rank};
    if (shoal_allreduce(x, x, 3, SHOAL_FLOAT64, SHOAL_SUM, comm) != SHOAL_OK)
        return 4;
    shoal_comm_destroy(comm);
    if (pid == 0)
        return !(x[0] == 3 && x[1] == 4 && x[2] == -1);
    int st;
    waitpid(pid, &st, 0);
    printf("%g %g %g\n", x[0], x[1], x[2]);
    return !(x[0] == 3 && x[1] == 4 && x[2] == -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
PROG
export PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig"
# A sanitizer build of the library needs its runtime in the program too.
SAN=
case "$(ldd "$TMP/prefix/lib/libshoal.so" 2>/dev/null)" in
*libasan*) SAN="-fsanitize=address,undefined" ;;
*libtsan*) SAN="-fsanitize=thread" ;;
esac
check "a program builds with pkg-config shoal" \
    sh -c "cc -Wall -Werror $SAN \"$TMP/prog.c\" \$(pkg-config --cflags --libs shoal) -o \"$TMP/prog\""
check "it runs a 2-rank all-reduce on the installed libshoal.so.0" \
    env LD_LIBRARY_PATH="$TMP/prefix/lib" "$TMP/prog"
check "it links the shared library, not the archive" \
    sh -c "LD_LIBRARY_PATH=\"$TMP/prefix/lib\" ldd \"$TMP/prog\" | grep -q libshoal.so.0"
check "libshoal.so exports only shoal_* calls" \
    sh -c "nm -D --defined-only \"$TMP/prefix/lib/libshoal.so\" | awk '\$2 == \"T\" && \$3 !~ /^shoal_/' | grep -q . && exit 1 || exit 0"
cat >"$TMP/nccl_prog.c" <<'PROG'
#include <nccl.h>
int main(void)
{
    int v = 0;
    ncclComm_t comm;
    int x[2] = {1, 2};
    if (ncclGetVersion(&v) != ncclSuccess || v != NCCL_VERSION_CODE ||
        ncclCommInitAll(&comm, 1, NULL) != ncclSuccess ||
        ncclAllReduce(x, x, 2, ncclInt32, ncclSum, comm, NULL) != ncclSuccess)
        return 1;
    return ncclCommDestroy(comm) != ncclSuccess || x[0] != 1 || x[1] != 2;
}
PROG
check "an NCCL program builds against the installed shoal/nccl.h without CUDA" \
    cc -Wall -Werror $SAN -I"$TMP/prefix/include/shoal" "$TMP/nccl_prog.c" \
    -L"$TMP/prefix/lib/shoal" -lnccl -o "$TMP/nccl_prog"
check "it runs on the installed shoal/libnccl.so.2" \
    env LD_LIBRARY_PATH="$TMP/prefix/lib/shoal" "$TMP/nccl_prog"
