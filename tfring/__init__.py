"""tfring: Horovod-style data-parallel training for TensorFlow, Keras 3, PyTorch and MXNet.

    import tfring as hvd          # the TensorFlow API (Horovod's `import horovod.tensorflow as hvd`)
    hvd.init()
    y = hvd.allreduce(x)          # averaged over all ranks

`import tfring` itself imports no framework: the TensorFlow API (`tfring.tensorflow`) loads on first use of a
name, so `import tfring.torch`, `import tfring.mxnet` and the launcher never load TensorFlow.
"""
import importlib

from tfring.version import __version__

_TF_API = "tfring.tensorflow"


def __getattr__(name):
    if name.startswith("__") and name != "__all__":  # `from tfring import *` and tools ask for __all__
        raise AttributeError(name)
    api = importlib.import_module(_TF_API)
    try:
        value = getattr(api, name)
    except AttributeError:
        raise AttributeError("module 'tfring' has no attribute %r" % name) from None
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(importlib.import_module(_TF_API).__all__))
