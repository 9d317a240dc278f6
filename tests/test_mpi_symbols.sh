#!/bin/bash
# The MPI door exports exactly its entry points, and MPI programs' calls
# bind to them, as TAP for prove. For each build ($BUILD/libshoal_mpi.so
# against Open MPI, $BUILD/mpich/libshoal_mpi.so against MPICH): its
# defined dynamic symbols (tests/symbols.sh) are the C functions the door
# serves and the Fortran names src/mpi/fortran.c defines for that MPI,
# listed here one by one: a missing or extra name fails, by name. Then
# test programs run at one rank with the door preloaded and
# LD_DEBUG=bindings, and the dynamic linker's own record must show the
# calls reaching the door: the C program's MPI_Allreduce; under Open MPI,
# the Fortran programs' mpi_allreduce_ (use mpi) and mpi_allreduce_f08_
# and mpi_barrier_f08_ (use mpi_f08); under MPICH, whose Fortran bindings
# call the C MPI_* themselves, libmpichfort's MPI_Allreduce (from either
# binding) and the f08 program's mpi_barrier_f08_ (the one of MPICH's
# Fortran routines that calls PMPI_*). Last, bcast_check counts the
# PMPI_Bcast calls the door makes of its own: none. Run from the
# repository root (make test does).
TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_mpi_symbols.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=120
# shellcheck source=tests/tap.sh
. tests/tap.sh
# shellcheck source=tests/symbols.sh
. tests/symbols.sh
# shellcheck source=tests/mpi_env.sh
. tests/mpi_env.sh
mpi_need ompi
mpi_need mpich
for tool in nm readelf comm; do
    command -v "$tool" >/dev/null 2>&1 || missing_all "$tool is not installed"
done

# The C entry points, the same in both builds.
C_NAMES="MPI_Allreduce MPI_Reduce MPI_Bcast MPI_Allgather MPI_Reduce_scatter_block
MPI_Reduce_scatter MPI_Alltoall MPI_Alltoallv MPI_Gather MPI_Scatter MPI_Barrier
MPI_Iallreduce MPI_Ireduce MPI_Ibcast MPI_Iallgather MPI_Ireduce_scatter_block
MPI_Ireduce_scatter MPI_Ialltoall MPI_Ialltoallv MPI_Igather MPI_Iscatter MPI_Ibarrier
MPI_Wait MPI_Waitall MPI_Waitany MPI_Waitsome MPI_Test MPI_Testall MPI_Testany
MPI_Testsome MPI_Request_get_status MPI_Request_free MPI_Cancel"

# The Fortran entry points of the Open MPI build: the four names of
# mpif.h / use mpi and the mpi_f08 one, for each blocking collective.
OMPI_FORTRAN="MPI_ALLREDUCE mpi_allreduce mpi_allreduce_ mpi_allreduce__ mpi_allreduce_f08_
MPI_REDUCE mpi_reduce mpi_reduce_ mpi_reduce__ mpi_reduce_f08_
MPI_BCAST mpi_bcast mpi_bcast_ mpi_bcast__ mpi_bcast_f08_
MPI_ALLGATHER mpi_allgather mpi_allgather_ mpi_allgather__ mpi_allgather_f08_
MPI_REDUCE_SCATTER_BLOCK mpi_reduce_scatter_block mpi_reduce_scatter_block_
mpi_reduce_scatter_block__ mpi_reduce_scatter_block_f08_
MPI_REDUCE_SCATTER mpi_reduce_scatter mpi_reduce_scatter_ mpi_reduce_scatter__
mpi_reduce_scatter_f08_
MPI_ALLTOALL mpi_alltoall mpi_alltoall_ mpi_alltoall__ mpi_alltoall_f08_
MPI_ALLTOALLV mpi_alltoallv mpi_alltoallv_ mpi_alltoallv__ mpi_alltoallv_f08_
MPI_GATHER mpi_gather mpi_gather_ mpi_gather__ mpi_gather_f08_
MPI_SCATTER mpi_scatter mpi_scatter_ mpi_scatter__ mpi_scatter_f08_
MPI_BARRIER mpi_barrier mpi_barrier_ mpi_barrier__ mpi_barrier_f08_"

# The Fortran entry points of the MPICH build: mpi_f08's MPI_BARRIER
# alone (fortran.c says why).
MPICH_FORTRAN="mpi_barrier_f08_"

# exports_exactly LIB NAMES: LIB defines NAMES (words) and nothing else.
exports_exactly() {
    local lib=$1
    tr -s ' \n' '\n\n' <<<"$2" | sed '/^$/d' | sort -u >"$TMP/want"
    dynamic_symbols "$lib" >"$TMP/syms" || { echo "cannot read the symbols of $lib"; return 1; }
    awk '{ print $3 }' "$TMP/syms" | sort -u >"$TMP/have"
    comm -23 "$TMP/want" "$TMP/have" | sed 's/^/missing: /'
    comm -13 "$TMP/want" "$TMP/have" | sed 's/^/extra: /'
    cmp -s "$TMP/want" "$TMP/have"
}

# binds_to_door LOG FROM SYMBOL: in the dynamic linker's LOG
# (LD_DEBUG=bindings), SYMBOL as the file FROM (a name, without its
# directory) looks it up is bound to the door, and to nothing else.
binds_to_door() {
    local from lines
    from=$(sed 's/[.]/\\./g' <<<"$2")
    lines=$(grep -h "binding file \([^ ]*/\)\?$from \[[0-9]*\] to .*: normal symbol \`$3'" "$1")
    echo "${lines:-no binding of $3 from $2}"
    [ -n "$lines" ] && ! grep -v "\] to [^ ]*/libshoal_mpi\.so \[" <<<"$lines" >/dev/null
}

# bindings MPI PROG: run PROG (a name under $BUILD/tests/mpi, built for
# MPI) at one rank through MPI's door with LD_DEBUG=bindings, once; its
# directory holds the run's output (out) and the dynamic linker's log
# (log, absent when the run failed).
bindings() {
    local dir=$TMP/bind_$1_$2
    if [ ! -d "$dir" ]; then
        mkdir -p "$dir"
        MPI_RUN_ENV="LD_DEBUG=bindings LD_DEBUG_OUTPUT=$dir/ld" \
            mpi_run "$1" 1 1 "$BUILD/tests/mpi/$2" >"$dir/out" 2>&1 &&
            cat "$dir"/ld.* >"$dir/log" 2>/dev/null
    fi
    echo "$dir"
}

# check_binding MPI PROG FROM SYMBOL: one TAP line.
check_binding() {
    local dir bin=$BUILD/tests/mpi/$2 desc="$1, $2: $4 looked up by $3 binds to the door"
    [ "$1" = ompi ] || bin=$bin.mpich
    if [ ! -x "$bin" ]; then
        missing "$desc" "$bin not built (no Fortran compiler?)"
        return
    fi
    dir=$(bindings "$1" "$2")
    if [ ! -f "$dir/log" ]; then
        fail "$desc: $bin did not run"
        show "$dir/out"
    elif binds_to_door "$dir/log" "$3" "$4" >"$TMP/bind.out"; then
        pass "$desc"
    else
        fail "$desc"
        show "$TMP/bind.out"
    fi
}

echo "1..12"
for mpi in ompi mpich; do
    if [ "$mpi" = ompi ]; then
        door_lib=$DOOR_OMPI names="$C_NAMES $OMPI_FORTRAN" suffix=
    else
        door_lib=$DOOR_MPICH names="$C_NAMES $MPICH_FORTRAN" suffix=.mpich
    fi
    desc="$mpi: ${door_lib#"$PWD"/} exports exactly its $(wc -w <<<"$names") entry points"
    if exports_exactly "$door_lib" "$names" >"$TMP/exports.out"; then
        pass "$desc"
    else
        fail "$desc"
        show "$TMP/exports.out"
    fi
    check_binding "$mpi" door_check "door_check$suffix" MPI_Allreduce
    if [ "$mpi" = ompi ]; then
        check_binding ompi fortran_check fortran_check mpi_allreduce_
        check_binding ompi fortran_f08_check fortran_f08_check mpi_allreduce_f08_
        check_binding ompi fortran_f08_check fortran_f08_check mpi_barrier_f08_
    else
        check_binding mpich fortran_check libmpichfort.so.12 MPI_Allreduce
        check_binding mpich fortran_f08_check libmpichfort.so.12 MPI_Allreduce
        check_binding mpich fortran_f08_check fortran_f08_check.mpich mpi_barrier_f08_
    fi
done

# What the door calls of MPI: no PMPI_Bcast to map a communicator (on
# MPI_COMM_WORLD, a duplicate and a split), which would leave Open MPI's
# later calls slower (door.c). bcast_check counts the broadcasts the
# door's PMPI_Bcast reaches (its own definition, which the dynamic linker
# puts before MPI's).
for mpi in ompi mpich; do
    out=$TMP/bcast_$mpi.txt
    mpi_run "$mpi" 3 1 "$BUILD/tests/mpi/bcast_check" >"$out" 2>&1
    rc=$?
    if [ "$rc" = 0 ] && grep -q "bcast_check: ok" "$out"; then
        pass "$mpi, 3 ranks: the door maps 3 communicators without a PMPI_Bcast"
    else
        fail "$mpi, 3 ranks: the door's PMPI_Bcast calls (exit $rc)"
        show "$out"
    fi
done
