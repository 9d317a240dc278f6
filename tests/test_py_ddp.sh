#!/bin/sh
# DistributedDataParallel on shoal as TAP for prove: tests/py/ddp_train.py
# under Debian's torch (/usr/bin/python3), 4 ranks started by
# multiprocessing (spawn) over a FileStore, training the digits MLP of
# tests/test_train_digits.c for 200 steps. On the shoal backend
# (init_process_group(backend="shoal")) the parameters are bitwise the same
# on every rank after every step and the final loss is gloo's to float
# tolerance; each of shoal's DDP hooks (python/shoal/torch/hooks.py:
# allreduce, int8 without and with error feedback, ternary, PowerSGD rank
# 2), on a gloo group and on a shoal group, keeps the ranks bitwise equal
# and the loss within test_train_digits.c's bounds; a checkpoint of model,
# optimizer and hook state restored into fresh objects replays the rest of
# the run bit for bit. One run of the program makes every check (one TAP
# line each, in the order of `ddp_train.py --list`). Run from the
# repository root (make test does); the extension is built by make in the
# plain build where torch's headers are.

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_py_ddp.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=240
# shellcheck source=tests/tap.sh
. tests/tap.sh

# shellcheck source=tests/py_env.sh
. tests/py_env.sh
py_need_torch
DIGITS=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
[ -f "$DIGITS" ] || missing_all "the digits data set $DIGITS is not installed (python3-sklearn)"

ids=$("$PY" tests/py/ddp_train.py --list 2>"$TMP/list.txt") || {
    echo "1..1"
    fail "ddp_train.py --list"
    show "$TMP/list.txt"
    exit 1
}
echo "1..$(echo "$ids" | wc -w)"

out=$TMP/ddp.txt
$LIMIT "$PY" tests/py/ddp_train.py --ranks 4 --steps 200 --init file >"$out" 2>&1
rc=$?
shown=0
for id in $ids; do
    line=$(grep "^ddp_train: $id ok: " "$out")
    if [ "$rc" = 0 ] && [ -n "$line" ]; then
        pass "${line#"ddp_train: $id ok: "}"
    else
        line=$(grep "^ddp_train: $id FAILED: " "$out")
        fail "$id: ${line:+${line#"ddp_train: $id FAILED: "}}${line:-no result} (exit $rc)"
        [ "$shown" = 1 ] || show "$out"
        shown=1
    fi
done
# The figures of every variant, as TAP comments.
grep '^# ' "$out"
