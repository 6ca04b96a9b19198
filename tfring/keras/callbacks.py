"""tfring.keras.callbacks: the callbacks of tfring.callbacks, under Horovod's import path. They stand on this
Keras layer, so it reaches them by name on first use instead of importing them back."""
import importlib

_NAMES = ["BestModelCheckpoint", "BroadcastGlobalVariablesCallback", "LearningRateScheduleCallback",
          "LearningRateWarmupCallback", "MetricAverageCallback", "MetricsCallback"]


def __getattr__(name):
    if name in _NAMES:
        return getattr(importlib.import_module("tfring.callbacks"), name)
    raise AttributeError("module 'tfring.keras.callbacks' has no attribute %r" % (name,))


def __dir__():
    return sorted(set(globals()) | set(_NAMES))
