"""The GPU path (NCCL + CUDA kernels; the TF ops and, where torch is installed, the torch extension) compiles with
nvcc and loads; no GPU is available to this project, so nothing here runs a collective on a GPU. Skipped where nvcc
or NCCL's headers are missing."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, rank_env, run_ranks

pytestmark = pytest.mark.slow  # compiles the GPU path with nvcc

CHECK = r"""
import tfring as hvd, tensorflow as tf
from tensorflow.python.framework import kernels
hvd.init()
assert hvd.nccl_built() and hvd.cuda_built()
for op in ["HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodBroadcast",
           "HorovodAlltoall", "HorovodReducescatter"]:
    devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
    assert devices == {"CPU", "GPU"}, (op, devices)
alltoall_gpu = [k for k in kernels.get_registered_kernels_for_op("HorovodAlltoall").kernel if k.device_type == "GPU"]
assert set(alltoall_gpu[0].host_memory_arg) == {"splits", "received_splits"}, alltoall_gpu[0]
# CPU tensors in a GPU build still take the MPI path, on every rank.
out = hvd.allreduce(tf.constant([1.0, 2.0]) * (hvd.rank() + 1), op=hvd.Sum).numpy()
n = hvd.size()
assert list(out) == [n * (n + 1) / 2, n * (n + 1)], out
print("GPU-BUILD-OK rank", hvd.rank())
"""


CHECK_TORCH = r"""
import torch
import tfring.torch as hvd
hvd.init()
assert hvd.nccl_built()
out = hvd.allreduce(torch.tensor([1.0, 2.0]) * (hvd.rank() + 1), op=hvd.Sum)
n = hvd.size()
assert out.tolist() == [n * (n + 1) / 2, n * (n + 1)], out
print("GPU-BUILD-OK rank", hvd.rank())
"""


def _has_torch():
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def _nccl_available():
    if os.environ.get("NCCL_HOME"):
        return True
    from importlib import metadata
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            metadata.distribution(dist)
            return True
        except metadata.PackageNotFoundError:
            pass
    return False


@pytest.mark.skipif(shutil.which("nvcc") is None or not _nccl_available(),
                    reason="needs nvcc and NCCL headers (pip install nvidia-nccl-cu12)")
def test_gpu_build_compiles_loads_and_keeps_the_cpu_path(tmp_path):
    with_torch = _has_torch()
    env = dict(os.environ, TFRING_GPU_OPERATIONS="NCCL", TF_CPP_MIN_LOG_LEVEL="2",
               **{"TFRING_WITH_PYTORCH" if with_torch else "TFRING_WITHOUT_PYTORCH": "1"})
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
                            "--build-temp", str(tmp_path / "tmp")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=1200)
    assert build.returncode == 0, build.stdout[-5000:]
    assert "nvcc" in build.stdout and "gpu_kernels.cu" in build.stdout
    # A package tree whose library is the GPU build: the Python sources of the tree under test plus that .so.
    import tfring
    pkg = tmp_path / "pkg" / "tfring"
    shutil.copytree(os.path.dirname(tfring.__file__), str(pkg),
                    ignore=shutil.ignore_patterns("_tfring*.so", "libtfring_core.so", "build_info.json", "__pycache__"))
    built = tmp_path / "lib" / "tfring"
    for f in glob.glob(str(built / "*")) + glob.glob(str(built / "*" / "_tfring*.so")):
        if os.path.isfile(f):
            shutil.copy(f, str(pkg / os.path.relpath(os.path.dirname(f), str(built))))
    env = rank_env()
    env["PYTHONPATH"] = str(tmp_path / "pkg")
    checks = [("check.py", CHECK)] + ([("check_torch.py", CHECK_TORCH)] if with_torch else [])
    for name, text in checks:
        script = tmp_path / name
        script.write_text(text)
        proc = run_ranks(2, [str(script)], timeout=300, env=env)
        assert proc.returncode == 0, proc.stdout[-5000:]
        assert proc.stdout.count("GPU-BUILD-OK") == 2, proc.stdout[-5000:]
    if with_torch:  # the torch extension was compiled with the CUDA stream code and linked against torch's CUDA libs
        torch_lines = [line for line in build.stdout.splitlines() if "tfring/cc/torch/ops.cc" in line]
        assert torch_lines and "-DTFRING_HAVE_NCCL=1" in torch_lines[0], build.stdout[-5000:]
        ext = glob.glob(str(built / "torch" / "_tfring_torch*.so"))
        needed = subprocess.run(["readelf", "-d", ext[0]], stdout=subprocess.PIPE, text=True).stdout
        assert "libc10_cuda.so" in needed, needed  # (libtorch_cuda is dropped by --as-needed: no symbol used)


def test_unknown_gpu_operations_value_is_refused(tmp_path):
    env = dict(os.environ, TFRING_GPU_OPERATIONS="ROCM", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
                           "--build-temp", str(tmp_path / "tmp")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode != 0
    assert "TFRING_GPU_OPERATIONS='ROCM'" in proc.stdout and "NCCL" in proc.stdout
