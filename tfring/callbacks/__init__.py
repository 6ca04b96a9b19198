"""Keras callbacks for distributed training (also importable as tfring.keras.callbacks, Horovod's path).

They subclass the Callback of the Keras in use (tf_keras with TF_USE_LEGACY_KERAS=1) and print through its
messaging: `keras.config.disable_interactive_logging()` sends their messages to absl logging, as Keras' own.
"""
from tfring.callbacks.best_checkpoint import BestModelCheckpoint
from tfring.callbacks.broadcast import BroadcastGlobalVariablesCallback
from tfring.callbacks.lr_schedule import LearningRateScheduleCallback, LearningRateWarmupCallback
from tfring.callbacks.metric_average import MetricAverageCallback
from tfring.callbacks.metrics import MetricsCallback
