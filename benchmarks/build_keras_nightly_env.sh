#!/usr/bin/env bash
# keras-nightly (3.16 dev: keras.distribution.DataParallel on the torch backend, torch DDP underneath) in its own
# venv, for the Keras-backends benchmark's anchor only (issue #47). It overlays keras-nightly on the tfring venv
# (default .venv): its own site-packages comes first, the tfring venv's follows through a .pth file, so torch,
# mpi4py and the installed tfring are the very same files the other rows run. Seconds, no second torch download.
#   bash benchmarks/build_keras_nightly_env.sh [DIR] [BASE_VENV]
#   then: .venv/bin/python benchmarks/keras_backends.py --keras-nightly-python DIR/bin/python
set -euo pipefail
DIR=${1:-$HOME/keras-nightly-env}
BASE=$(cd "${2:-.venv}" && pwd)
VERSION=${KERAS_NIGHTLY_VERSION:-3.16.0.dev2026102704}
"$BASE/bin/python" -m venv --without-pip "$DIR"
SITE=$("$DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
BASE_SITE=$("$BASE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# keras-nightly's requirements (absl-py, numpy, rich, namex, h5py, optree, ml-dtypes) are all in the tfring venv.
"$BASE/bin/pip" install -q --no-deps --target "$SITE" "keras-nightly==$VERSION"
echo "$BASE_SITE" > "$SITE/zz_tfring_venv.pth"
"$DIR/bin/python" -c 'import keras, torch, tfring; print("keras", keras.__version__, "torch", torch.__version__)'
