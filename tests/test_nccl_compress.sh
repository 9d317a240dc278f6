#!/bin/bash
# The NCCL door with SHOAL_COMPRESS=int8: the conformance program's
# compression case alone (tests/nccl/vendor_compress.c), at 1 to 4 ranks,
# with the default SHOAL_COMPRESS_MIN (1 MiB). Large float sums and averages
# must come back within int8's error and, on two ranks or more, not exact;
# small ones, integers and other ops exact. tests/test_nccl_vendor.sh runs
# the same case without the setting, where everything is exact.
cd "$(dirname "$0")/.." || exit 1
export SHOAL_COMPRESS=int8
unset SHOAL_COMPRESS_MIN
export NCCL_VENDOR_TEST_FILTER='SHOAL_COMPRESS*'
exec bash tests/test_nccl_vendor.sh
