"""The GPU path (NCCL + CUDA kernels; the TF ops, their XLA lowering's "CUDA" FFI handlers and, where torch and jax
are installed, the torch extension and the JAX binding's CUDA targets) compiles with nvcc and loads; no GPU is
available to this project, so nothing here runs a collective on a GPU. Skipped where nvcc or NCCL's headers are
missing."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, ccache, rank_env, run_ranks

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
# The XLA lowering's "CUDA" handlers: TensorFlow's XLA took them (tfring_xla_cuda_registration() == ""), so
# Keras' jit_compile="auto" on a GPU keeps XLA (tfring/keras/_backend/_tf_jit_fallback.py).
import ctypes, glob, os
from tfring.keras._backend import _tf_jit_fallback as jit_fallback
lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(hvd.__file__), "tensorflow", "_tfring*.so"))[0])
lib.tfring_xla_cuda_registration.restype = ctypes.c_char_p
assert lib.tfring_xla_cuda_registration() == b"", lib.tfring_xla_cuda_registration()
assert jit_fallback.served_device_types() == {"CPU", "GPU"}
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


CHECK_JAX = r"""
import jax, jax.numpy as jnp
from jaxlib import xla_client
import tfring.jax as hvd
hvd.init()
# The CUDA targets were registered: a CPU-only jaxlib queues them for a CUDA plugin (jaxlib's own bookkeeping).
queued = {name for name, *_ in getattr(xla_client, "_custom_callback", {}).get("CUDA", [])}
expected = {"tfring_" + k for k in ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")}
assert expected <= queued, queued
# The CPU handlers still serve jax.jit in a GPU build.
out = jax.jit(lambda x: hvd.allreduce(x, op=hvd.Sum, name="gpu_build_jit"))(jnp.array([1.0, 2.0]) * (hvd.rank() + 1))
n = hvd.size()
assert out.tolist() == [n * (n + 1) / 2, n * (n + 1)], out
print("GPU-BUILD-OK rank", hvd.rank())
"""

GPU_HANDLERS = ["tfring_jax_gpu_" + k for k in ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")]


def _has(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None


def _has_torch():
    return _has("torch")


def _exports(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], stdout=subprocess.PIPE, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


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
    with_torch, with_jax = _has_torch(), _has("jaxlib")
    # One CUDA architecture: what is proven here is that the device code compiles and links, not for which GPUs
    # (the -gencode list per TFRING_CUDA_ARCHS is tests/cc/test_knobs_build.py's): nvcc 2.3 instead of 5.4 CPU-s.
    env = dict(os.environ, TFRING_GPU_OPERATIONS="NCCL", TF_CPP_MIN_LOG_LEVEL="2", TFRING_CUDA_ARCHS="80",
               **{"TFRING_WITH_PYTORCH" if with_torch else "TFRING_WITHOUT_PYTORCH": "1",
                  "TFRING_WITH_JAX" if with_jax else "TFRING_WITHOUT_JAX": "1"})
    if ccache():  # a rerun with the same sources and headers reuses the objects (the link and the checks still run)
        env["TFRING_COMPILER_LAUNCHER"] = ccache()
    # Only what a GPU build compiles differently is compiled (setup.reads_gpu_macros): the objects of the CPU build
    # this tree was installed from (pip builds in the tree's build/) serve for the rest, as in a developer's tree.
    cpu_objects = glob.glob(os.path.join(ROOT, "build", "temp.*", "tfring_obj"))
    if cpu_objects:
        shutil.copytree(cpu_objects[0], str(tmp_path / "tmp" / "tfring_obj"))  # copy2: their times stay
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
                            "--build-temp", str(tmp_path / "tmp")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=1200)
    assert build.returncode == 0, build.stdout[-5000:]
    assert "nvcc" in build.stdout and "gpu_kernels.cu" in build.stdout
    compile_lines = [line for line in build.stdout.splitlines() if line.startswith("g++ -c ")]
    compiled = {line.split()[2]: line for line in compile_lines}
    assert "-DTFRING_HAVE_NCCL=1" in compiled["tfring/cc/common/runtime.cc"]
    # A file that never sees the GPU macros compiles as in the CPU build (so its object is reused when there is one)
    assert "-DTFRING_HAVE_NCCL" not in compiled.get("tfring/cc/common/coordinator.cc", "")
    print("GPU build: %d files compiled with g++ (%s CPU objects)" % (len(compiled), "with" if cpu_objects else "no"))
    # The XLA "CUDA" handlers are compiled for every XLA user (TF's lowering; the JAX binding) and exported.
    gpu_handler_lines = [line for line in compile_lines if line.startswith("g++ -c tfring/cc/xla/handlers_gpu.cc")]
    assert len(gpu_handler_lines) == (2 if with_jax else 1), build.stdout[-5000:]
    assert all("-DTFRING_HAVE_NCCL=1" in line for line in gpu_handler_lines)
    tf_ext = glob.glob(str(tmp_path / "lib" / "tfring" / "tensorflow" / "_tfring*.so"))[0]
    assert set(GPU_HANDLERS + ["tfring_xla_cuda_registration"]) <= _exports(tf_ext)
    if with_jax:
        jax_ext = glob.glob(str(tmp_path / "lib" / "tfring" / "jax" / "_tfring_jax*.so"))[0]
        assert set(GPU_HANDLERS) <= _exports(jax_ext)
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
    checks = ([("check.py", CHECK)] + ([("check_torch.py", CHECK_TORCH)] if with_torch else [])
              + ([("check_jax.py", CHECK_JAX)] if with_jax else []))
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
