"""Loads TensorFlow's op library (tfring/tensorflow/_tfring*.so) once, after the core it links to."""
import ctypes

import tensorflow as tf

from tfring.common import library

_PATTERN = "_tfring*.so"
_ops = None


def load():
    """TensorFlow's generated op module for tfring's ops (HorovodAllreduce, ...). Loaded once per process."""
    global _ops
    if _ops is None:
        _ops = library.load_extension("tensorflow", tf.__version__, "tensorflow", _PATTERN, tf.load_op_library)
        if library.loaded() is None:  # a Bazel build: the core is inside the op library
            library.adopt(library.find_extension("tensorflow", _PATTERN))
    return _ops


def built_tf_version():
    """The TensorFlow version compiled into the op library itself."""
    load()
    c = ctypes.CDLL(library.find_extension("tensorflow", _PATTERN))
    c.tfring_built_tf_version.restype = ctypes.c_char_p
    return c.tfring_built_tf_version().decode()
