"""Loads TensorFlow's op library (tfring/tensorflow/_tfring*.so) once, after the core it links to."""
import ctypes
import os

import tensorflow as tf

from tfring.common import library

_ops = None


def _path():
    path = library.find_extension("tensorflow", "_tfring*.so")
    if path is None:
        raise ImportError("tfring's TensorFlow op library is not built (no tfring/tensorflow/_tfring*.so): "
                          "TensorFlow was not found when tfring was built. " + library.REBUILD)
    return path


def load():
    """TensorFlow's generated op module for tfring's ops (HorovodAllreduce, ...). Loaded once per process."""
    global _ops
    if _ops is not None:
        return _ops
    path = _path()
    built_for = library.build_info().get("tensorflow")
    library.check_built_for("TensorFlow", built_for, tf.__version__)
    has_core = os.path.exists(os.path.join(library.PACKAGE_DIR, library.CORE_LIBRARY))
    if has_core:
        library.core()  # first, by its path: the op library's dependency on it resolves to this copy
    else:
        library.prepare_mpi_environment()
    try:
        _ops = tf.load_op_library(path)
    except (tf.errors.NotFoundError, OSError) as e:
        raise ImportError("tfring's op library %s failed to load in TensorFlow %s (built for %s): %s. %s"
                          % (path, tf.__version__, built_for or "unknown", e, library.REBUILD)) from e
    if not has_core:
        library.adopt(path)  # a Bazel build: the core is inside the op library
    return _ops


def built_tf_version():
    """The TensorFlow version compiled into the op library itself."""
    load()
    c = ctypes.CDLL(_path())
    c.tfring_built_tf_version.restype = ctypes.c_char_p
    return c.tfring_built_tf_version().decode()
