#!/bin/sh
# The c10d backend "shoal" (python/shoal/torch) as TAP for prove:
# tests/py/torch_backend.py under Debian's torch (/usr/bin/python3), its
# ranks started by torchrun (env:// rendezvous) and by multiprocessing
# (spawn, over a FileStore or a TCPStore), 2 to 4 of them. Every collective
# of torch.distributed is checked against numpy (every dtype, every
# ReduceOp, in place and not, sizes 0, 1, odd and multi-MiB); async works
# waited in any order and their futures; new_group of subsets (also under
# a gloo world); the backend's refusals; a tensor of another shape on one
# rank (shoal's mismatch error on every rank); a rank that dies (the
# others raise within shoal's deadline, shortened here). Run from the
# repository root (make test does); the extension is built by make in the
# plain build where torch's headers are.

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_py_torch.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# shellcheck disable=SC2034 # read by tests/tap.sh
TAP_LIMIT_S=120
# shellcheck source=tests/tap.sh
. tests/tap.sh

# shellcheck source=tests/py_env.sh
. tests/py_env.sh
py_need_torch

# all_ok OUT MODES NP RC: the run exited 0 and every rank said that it
# passed each mode.
all_ok() {
    [ "$4" = 0 ] || return 1
    for m in $(echo "$2" | tr , " "); do
        [ "$(grep -o "torch_backend: $m rank [0-9]* ok" "$1" | grep -c .)" = "$3" ] || return 1
    done
}

# torchrun NP MODE: the program under torchrun, with NP ranks on this host.
torchrun() {
    out=$TMP/torchrun_$2_$1.txt
    # Python 3.11's torch 1.13 needs the redirects and a log folder for
    # its workers' output; --tee puts it on the agent's stdout too.
    $LIMIT "$PY" -m torch.distributed.run --nproc_per_node "$1" --master_port "$(free_port)" \
        --redirects 1 --tee 1 --log_dir "$TMP/logs_$2_$1" \
        tests/py/torch_backend.py "$2" >"$out" 2>&1
    rc=$?
    if all_ok "$out" "$2" "$1" "$rc"; then
        pass "torchrun, $1 ranks: $2"
    else
        fail "torchrun, $1 ranks: $2 (exit $rc)"
        show "$out"
    fi
}

# spawn_ok OUT MODES NP RC: as all_ok; for fault, the rank that left says
# nothing and each other one says that it raised.
spawn_ok() {
    if [ "$2" != fault ]; then
        all_ok "$@"
        return
    fi
    [ "$4" = 0 ] &&
        [ "$(grep -o "torch_backend: fault rank [0-9]* ok" "$1" | grep -c .)" = $(($3 - 1)) ] &&
        [ "$(grep -o "rank [0-9]* raised after" "$1" | grep -c .)" = $(($3 - 1)) ]
}

# spawn NP INIT MODES [OPTIONS]: the program starting NP ranks itself.
spawn() {
    np=$1 init=$2 modes=$3
    shift 3
    out=$TMP/spawn_$(echo "$modes" | tr , _)_${np}_${init}_$#.txt
    $LIMIT "$PY" tests/py/torch_backend.py --spawn "$np" --init "$init" "$@" "$modes" \
        >"$out" 2>&1
    rc=$?
    if spawn_ok "$out" "$modes" "$np" "$rc"; then
        pass "multiprocessing, $np ranks, $init store: $modes $*"
    else
        fail "multiprocessing, $np ranks, $init store: $modes $* (exit $rc)"
        show "$out"
    fi
}

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

echo "1..6"
torchrun 2 collectives,async
torchrun 3 collectives,ddp
spawn 4 tcp async,groups
spawn 3 file groups --world gloo
spawn 3 tcp errors
# The dead rank is seen at once (its sockets close) or at shoal's
# heartbeat; the deadline bounds the rest.
SHOAL_TIMEOUT=20s
spawn 3 file fault
