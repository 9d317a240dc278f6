#!/bin/sh
# The RDMA test rig (tests/rdma/guest.sh): a qemu guest with Soft-RoCE
# boots, and its verbs stack carries reliable-connection traffic between
# its two rxe devices both ways (tests/rdma/verbs_check.sh, whose TAP lines
# are these). `make test-rdma` runs the same. The guest takes tens of
# seconds under emulation, so the sanitizer and clang variants of CI
# (SHOAL_TEST_QUICK=1) leave it to the plain one.
# shellcheck source=tests/tap.sh
. tests/tap.sh
if [ "${SHOAL_TEST_QUICK:-0}" = 1 ]; then
    echo "1..0 # SKIP the guest runs in the plain variant only (SHOAL_TEST_QUICK=1)"
    exit 0
fi
out=$(tests/rdma/guest.sh tests/rdma/verbs_check.sh 2>&1)
rc=$?
if [ "$rc" = 77 ]; then
    missing_all "the RDMA guest cannot run here: $(echo "$out" | grep '^guest.sh:' | head -1)"
fi
if echo "$out" | grep -q '^1\.\.'; then
    echo "$out"
    [ "$rc" = 0 ] || echo "# guest.sh exited $rc"
    exit "$rc"
fi
echo "1..1"
echo "not ok 1 - the guest ran no check (guest.sh exited $rc)"
echo "$out" | sed 's/^/# /'
exit 1
