#!/usr/bin/env bash
# Installs a tfring wheel (tools/build_wheel.sh) into a fresh venv where no compiler can be reached (every compiler
# name on PATH is a stub that fails, CC=false), then trains the README's Keras example on 2 processes from it,
# outside the checkout (the installed package, not the source tree). Prints the wheel's size and the install time.
#
#   tools/check_wheel.sh dist/tfring-*.whl
set -euo pipefail
WHEEL=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/nocc"
for c in cc gcc g++ c++ x86_64-linux-gnu-gcc x86_64-linux-gnu-g++ clang clang++ mpicc mpicxx nvcc; do
  printf '#!/bin/sh\necho "tools/check_wheel.sh: no compiler here (%s)" >&2\nexit 1\n' "$c" > "$WORK/nocc/$c"
  chmod +x "$WORK/nocc/$c"
done
export PATH=$WORK/venv/bin:$WORK/nocc:$PATH CC=false CXX=false PYTHONSAFEPATH=1
python3 -m venv "$WORK/venv"
start=$(date +%s)
pip install --quiet "$WHEEL"
echo "wheel: $(du -k "$WHEEL" | cut -f1) KiB; installed with its dependencies in $(( $(date +%s) - start )) s, no compiler"
pip install --quiet scikit-learn  # the example's data set (bundled in the wheel: no download)
cp "$ROOT/examples/keras_digits.py" "$WORK/"
cd "$WORK"
out=$(tfringrun -np 2 python keras_digits.py --target-accuracy 0.95 2>&1) || { echo "$out" | tail -30; exit 1; }
echo "$out" | grep "validation accuracy" | tail -1
python -c "import tfring, os; assert os.path.realpath(tfring.__file__).startswith('$WORK/venv/'), tfring.__file__"
