#!/usr/bin/env bash
# bazel test //:allreduce_np2_test: allreduce_check.py on 2 ranks against the Bazel-built op library.
# Args: mpirun python library script (paths from BUILD; the last two relative to the runfiles).
set -euo pipefail
mpirun=$1 python=$2 lib=$PWD/$3 script=$4
export HOME=${HOME:-$TEST_TMPDIR}  # bazel test clears HOME, and Open MPI's MPI_Init aborts without it
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TF_CPP_MIN_LOG_LEVEL=2
# A private, short session directory and loopback only, for PRRTE/PMIx's listener as for the ranks: a clean-clone CI
# once failed here with "The PMIx server's listener thread failed to start" (not reproduced in 16 runs since), and
# tests send traffic to loopback only.
TMPDIR=$(mktemp -d /tmp/tfring-bazel.XXXXXX)
export TMPDIR PMIX_MCA_ptl_tcp_if_include=lo
trap 'rm -rf "$TMPDIR"' EXIT
out=$("$mpirun" -np 2 --oversubscribe --bind-to none --mca btl_tcp_if_include lo "$python" "$script" "$lib" 2>&1) || {
  echo "$out"
  echo "mpirun failed"
  exit 1
}
echo "$out"
# Each rank prints this only after checking its own result.
for rank in 0 1; do
  grep -qx "allreduce ok on rank $rank" <<<"$out" || { echo "rank $rank did not report ok"; exit 1; }
done
