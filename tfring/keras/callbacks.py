"""tfring.keras.callbacks: the callbacks of tfring.callbacks, under Horovod's import path."""
from tfring.callbacks import (BestModelCheckpoint, BroadcastGlobalVariablesCallback,  # noqa: F401
                              LearningRateScheduleCallback, LearningRateWarmupCallback, MetricAverageCallback,
                              MetricsCallback)
