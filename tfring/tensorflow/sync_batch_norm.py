"""Horovod's import path `horovod.tensorflow.sync_batch_norm`: its `SyncBatchNormalization` is tfring's one
Keras layer (tfring.keras.sync_batch_norm; tf_keras' with TF_USE_LEGACY_KERAS=1), reached by name since a
binding imports no layer above it."""
import importlib


def __getattr__(name):
    if name == "SyncBatchNormalization":
        return importlib.import_module("tfring.keras.sync_batch_norm").SyncBatchNormalization
    raise AttributeError("module 'tfring.tensorflow.sync_batch_norm' has no attribute %r" % (name,))
