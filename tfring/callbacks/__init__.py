"""Keras callbacks for distributed training, one per file (also importable as tfring.keras.callbacks)."""
from tfring.callbacks.best_checkpoint import BestModelCheckpoint
from tfring.callbacks.broadcast import BroadcastGlobalVariablesCallback
from tfring.callbacks.lr_schedule import LearningRateScheduleCallback, LearningRateWarmupCallback
from tfring.callbacks.metric_average import MetricAverageCallback
