#!/bin/sh
# The Python package (python/shoal: ctypes over libshoal) as TAP for prove,
# with Debian's /usr/bin/python3, numpy and torch:
# - it loads the library named by SHOAL_LIBRARY, else the source tree's
#   build, and says where it looked when none loads; pip installs it into
#   a virtual environment offline, where it finds libshoal in the prefix;
# - 1 to 4 ranks started by multiprocessing (spawn) and joined through a
#   unique id run every collective against numpy (tests/py/suite_coll.py),
#   non-blocking requests and split (suite_async.py), the compressor
#   (suite_compress.py) and bad arguments (suite_errors.py) on numpy
#   arrays, and on 2 ranks on torch tensors too (the buffers are the same
#   pointers whatever the rank count; torch costs each rank seconds);
# - on 3 ranks, a count that differs raises the mismatch error everywhere
#   and a rank that leaves makes the others raise ShoalError naming it;
# - 2 ranks under torchrun form their communicator with from_env and run
#   collectives on numpy arrays and torch tensors.
# Run from the repository root with BUILD set (make test does).

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_py.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=120
# shellcheck source=tests/tap.sh
. tests/tap.sh
# shellcheck source=tests/py_env.sh
. tests/py_env.sh
ROOT=$PWD
LIBSHOAL=$ROOT/${BUILD:-build}/libshoal.so.0
if [ ! -e "$LIBSHOAL" ]; then
    echo "1..1"
    echo "not ok 1 - $LIBSHOAL is not built (run make)"
    exit 1
fi
export PYTHONDONTWRITEBYTECODE=1
# A rank that fails must fail the others soon, not after 300 s; a dead
# rank is noticed by its closed connections, well within this deadline.
export SHOAL_TIMEOUT=20s
TORCH=--torch
"$PY" -c 'import torch' 2>/dev/null || TORCH=

echo "1..25"

# ---- finding the library ---------------------------------------------------
out=$TMP/load.txt
SHOAL_LIBRARY=$LIBSHOAL PYTHONPATH=$ROOT/python "$PY" -c '
import shoal
print(shoal.library_path(), shoal.library_version())' >"$out" 2>&1
check "SHOAL_LIBRARY names the library the package loads" \
    grep -q "^$LIBSHOAL ([0-9]*, [0-9]*, [0-9]*)$" "$out" || show "$out"

installed=
for d in /usr/local/lib /usr/lib /usr/lib/x86_64-linux-gnu "$("$PY" -c 'import sys; print(sys.prefix)')/lib"; do
    [ -e "$d/libshoal.so.0" ] && installed="$d/libshoal.so.0"
done
if [ "${BUILD:-build}" != build ]; then
    skip "without SHOAL_LIBRARY, the source tree's build/: this is the BUILD=$BUILD variant"
elif [ -n "$installed" ]; then
    skip "without SHOAL_LIBRARY, the source tree's build/: $installed is installed and comes first"
else
    env -u SHOAL_LIBRARY PYTHONPATH="$ROOT/python" "$PY" -c '
import shoal
print(shoal.library_path())' >"$out" 2>&1
    check "without SHOAL_LIBRARY the package loads the source tree's build/libshoal.so.0" \
        grep -qx "$ROOT/build/libshoal.so.0" "$out" || show "$out"
fi

SHOAL_LIBRARY=$TMP/none/libshoal.so.0 PYTHONPATH=$ROOT/python "$PY" -c '
import shoal
try:
    shoal.get_unique_id()
except OSError as e:
    print(e)' >"$out" 2>&1
check "a library that is not there: OSError naming SHOAL_LIBRARY and the path" \
    grep -q "$TMP/none/libshoal.so.0 (SHOAL_LIBRARY)" "$out" || show "$out"

# pip, offline, into a virtual environment that sees Debian's packages; the
# library goes where make install PREFIX=venv would put it. The package is
# built from a copy, so that setuptools leaves nothing in the tree.
if ! "$PY" -m pip --version >/dev/null 2>&1; then
    missing "pip install ./python" "pip is not installed for $PY (python3-pip)"
    missing "the installed package" "pip is not installed for $PY (python3-pip)"
elif ! "$PY" -m venv --system-site-packages --without-pip "$TMP/venv" >"$out" 2>&1; then
    missing "pip install ./python" "$PY -m venv fails (python3-venv): $(head -n 1 "$out")"
    missing "the installed package" "$PY -m venv fails (python3-venv)"
else
    cp -r "$ROOT/python" "$TMP/src"
    cp "$LIBSHOAL" "$TMP/venv/lib/libshoal.so.0"
    (cd "$TMP" && env -u PYTHONPATH "$TMP/venv/bin/python" -m pip install -q --no-index \
        --no-build-isolation --no-deps "$TMP/src" &&
        env -u PYTHONPATH -u SHOAL_LIBRARY "$TMP/venv/bin/python" -c '
import numpy, shoal
print(shoal.library_path(), shoal.__file__)
with shoal.Communicator.from_unique_id(1, shoal.get_unique_id(), 0) as comm:
    x = numpy.arange(5.0)
    comm.all_reduce(x, op="max")
print("sum", x.sum())') >"$out" 2>&1
    check "pip install --no-build-isolation ./python into a venv; libshoal found in its prefix" \
        grep -q "^$TMP/venv/lib/libshoal.so.0 $TMP/venv/lib/python3[.0-9]*/site-packages/shoal/__init__.py" \
        "$out" || show "$out"
    check "the installed package runs an all-reduce" grep -q "^sum 10.0" "$out" || show "$out"
fi
if [ -n "$TORCH" ]; then
    pass "torch is installed for $PY: the 2-rank and torchrun runs check torch tensors too"
else
    missing "torch tensors" "torch is not installed for $PY (python3-torch)"
fi

# ---- ranks started by multiprocessing ---------------------------------------
export SHOAL_LIBRARY="$LIBSHOAL" PYTHONPATH="$ROOT/python"

# runs N SUITES [--torch]: one TAP line per suite from tests/py/ranks.py.
runs() {
    np=$1
    suites=$2
    log=$TMP/ranks_${np}_$(echo "$suites" | tr , _).txt
    # shellcheck disable=SC2086 # $3: --torch or nothing
    $LIMIT "$PY" tests/py/ranks.py "$np" "$suites" $3 >"$log" 2>&1
    rc=$?
    label="$np ranks"
    [ "$np" = 1 ] && label="1 rank"
    for s in $(echo "$suites" | tr , ' '); do
        if [ $rc -ne 124 ] && grep -q "^suite $s on $np ranks: ok" "$log"; then
            pass "$label: $s ($(sed -n "s/^suite $s on $np ranks: ok, //p" "$log"))"
        else
            fail "$label: $s (exit $rc)"
            show "$log"
        fi
    done
}

runs 1 coll,async,compress,bad
runs 2 coll,async,compress,bad $TORCH
runs 4 coll,async,compress
# The faults last: each leaves its communicator broken.
runs 3 coll,async,compress,bad,mismatch,death

# ---- torchrun ----------------------------------------------------------------
if [ -z "$TORCH" ]; then
    missing "torchrun, 2 ranks: from_env" "torch is not installed for $PY (python3-torch)"
    missing "torchrun: the launcher" "torch is not installed for $PY (python3-torch)"
else
    # torchrun's store on a free port whose next one, where shoal listens,
    # is free too.
    port=$("$PY" -c 'import socket
while True:
    a, b = socket.socket(), socket.socket()
    a.bind(("127.0.0.1", 0))
    try:
        b.bind(("127.0.0.1", a.getsockname()[1] + 1))
        break
    except OSError:
        a.close()
        b.close()
print(a.getsockname()[1])')
    out=$TMP/torchrun.txt
    # This torch under Python 3.11 needs --redirects and --tee, and takes
    # only 1 (stdout) there; the workers' stderr, where shoal logs, is the
    # launcher's.
    SHOAL_SECRET=py-package-test SHOAL_DEBUG=info SHOAL_DEBUG_SUBSYS=INIT \
        $LIMIT "$PY" -m torch.distributed.run --nproc_per_node 2 \
        --master_addr 127.0.0.1 --master_port "$port" --redirects 1 --tee 1 \
        --log_dir "$TMP/torchrun_logs" tests/py/torchrun_check.py >"$out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -o 'torchrun_check: rank [01] of 2 ok' "$out" | sort -u | wc -l)" -eq 2 ]; then
        pass "torchrun, 2 ranks: from_env, collectives on numpy and torch"
    else
        fail "torchrun, 2 ranks: from_env (exit $rc)"
        show "$out"
    fi
    check "torchrun: shoal recognised torchrun, rendezvous on MASTER_PORT+1" \
        grep -q "launcher torchrun, rank 0 of 2.*rendezvous 127.0.0.1:$((port + 1))" "$out" ||
        show "$out"
fi
