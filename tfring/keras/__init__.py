"""tfring for Keras 3 on any backend: `import tfring.keras as hvd` is a drop-in for `horovod.tensorflow.keras`.

The backend is Keras' own (`KERAS_BACKEND=tensorflow|jax|torch`); only its framework and tfring binding are
imported. Everywhere: the Keras `DistributedOptimizer` / `PartialDistributedOptimizer`, `callbacks`,
`load_model`, `SyncBatchNormalization`, `broadcast_global_variables`, collectives of numpy or Keras values (they
return the backend's tensors), and the binding's init/rank/size/process sets/reduce ops/`Compression`/object
collectives. On TensorFlow, everything of `tfring.tensorflow` too (DistributedGradientTape, ...), and with
TF_USE_LEGACY_KERAS=1 (tf_keras, Keras 2) the optimizer, callbacks and SyncBatchNormalization are tf_keras ones.
`elastic` (KerasState, run and the elastic callbacks) on every backend.
"""
import importlib

from tfring.keras._shared_api import *  # noqa: F401,F403  init, rank, size, Compression, Average, ...
from tfring.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer  # noqa: F401,E402
from tfring.keras.sync_batch_norm import SyncBatchNormalization  # noqa: F401,E402
from tfring.keras._functions import (allgather, allreduce, broadcast, broadcast_global_variables,  # noqa: F401,E402
                                     load_model, reducescatter)
from tfring.common.monitor import label_tensor, mark_step, metrics, straggler  # noqa: F401,E402


def __getattr__(name):
    # `hvd.callbacks` / `hvd.elastic` load on first use: the callbacks stand on this layer, which never imports
    # them back at module level.
    if name in ("callbacks", "elastic"):
        return importlib.import_module("tfring.keras." + name)
    raise AttributeError("module 'tfring.keras' has no attribute %r" % (name,))
