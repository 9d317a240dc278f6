# Shared by the TAP test scripts (tests/test_*.sh), sourced from the
# repository root: a clean launcher environment, a time limit for runs and
# the TAP helpers. Set TAP_LIMIT_S (seconds) before sourcing to change the
# limit of a run (default 600).
# shellcheck shell=sh disable=SC2034 # LIMIT and the helpers serve the sourcing script

# The runs choose their launcher themselves; a launcher around the script
# (a CI job under Slurm or mpirun) must not leak into them.
unset SHOAL_RANK SHOAL_SIZE SHOAL_LOCAL_RANK SHOAL_ADDR SHOAL_PORT SHOAL_SECRET \
    SHOAL_SECRET_FILE SHOAL_AUTH SHOAL_BOOTSTRAP_MAC \
    PMIX_NAMESPACE PMIX_RANK RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT \
    TORCHELASTIC_RUN_ID OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE \
    OMPI_COMM_WORLD_LOCAL_RANK SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_JOB_ID

# A hung run must end as a failure, not hang prove: prefix runs with $LIMIT.
if command -v timeout >/dev/null 2>&1; then
    LIMIT="timeout ${TAP_LIMIT_S:-600}"
else
    LIMIT=
fi

n=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() { n=$((n + 1)); echo "not ok $n - $1"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }
# missing DESCRIPTION REASON: a check that cannot run because a tool it
# needs is missing or cannot start here. A developer without the tool gets
# a skip; CI, which installs every tool the tests use
# (scripts/install-deps.sh) and exports SHOAL_CI=1 (.ci/run), gets a
# failure, so that no check passes there by not running.
missing() {
    if [ "${SHOAL_CI:-0}" = 1 ]; then
        fail "$1: $2 (SHOAL_CI=1: CI installs it, so it must run)"
    else
        skip "$1: $2"
    fi
}
# missing_all REASON: the same for a whole script that cannot run; prints
# the plan and exits.
missing_all() {
    if [ "${SHOAL_CI:-0}" = 1 ]; then
        echo "1..1"
        echo "not ok 1 - $1 (SHOAL_CI=1: CI installs it, so it must run)"
        exit 1
    fi
    echo "1..0 # SKIP $1"
    exit 0
}
# check DESCRIPTION COMMAND...: one TAP line from the command's status.
# Returns the command's status, so a failure can show the run's output.
check() {
    desc=$1
    shift
    if "$@"; then
        pass "$desc"
    else
        fail "$desc"
        return 1
    fi
}
# Show a run's output as TAP comments when one of its checks failed: on
# stderr, which prove prints in its summary mode too, so that a failure in
# CI says why (the last 80 lines).
show() {
    sed 's/^/# /' "$1" | tail -n 80 >&2
}
