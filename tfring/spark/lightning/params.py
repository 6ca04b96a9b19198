"""The Spark ML Params of LightningEstimator, with Horovod's getter/setter names (getNumProc, getTrainerArgs,
getLogEveryNSteps, ...): the torch estimator's shared ones plus Horovod's Lightning-only ones."""
from pyspark.ml.param import TypeConverters

from tfring.spark.torch.params import ESTIMATOR_PARAMS as TORCH_PARAMS

_SHARED = ("num_proc", "sample_weight_col", "gradient_compression", "feature_cols", "input_shapes", "label_cols",
           "validation", "batch_size", "val_batch_size", "epochs", "verbose", "random_seed", "shuffle",
           "partitions_per_process", "train_steps_per_epoch", "validation_steps_per_epoch", "store", "use_gpu",
           "backend_env", "backend", "inmemory_cache_all")

# name: (description, type converter or None, default)
ESTIMATOR_PARAMS = dict({n: TORCH_PARAMS[n] for n in _SHARED}, **{
    "model": ("the LightningModule to train (configure_optimizers, training_step and, with validation, "
              "validation_step; batches are dicts of column tensors)", None, None),
    "callbacks": ("Lightning callbacks for the Trainer (each rank runs its own copy)", None, []),
    "run_id": ("id of the run in the store (default: lightning_<time>_<random>)", None, None),
    "trainer_args": ("dict of Trainer arguments added to (or overriding) the estimator's", None, None),
    "logger": ("a Lightning logger (default: Lightning's default logger in <store>/runs/<run_id>/logs)", None, None),
    "log_every_n_steps": ("how often the Trainer logs (steps)", TypeConverters.toInt, 50),
    "terminate_on_nan": ("raise when a parameter is not finite after a training step", TypeConverters.toBoolean,
                         False),
    "profiler": ("a Lightning profiler (or its name, e.g. 'simple')", None, None),
    "num_gpus": ("GPUs per rank: None or 0 on CPUs; 1 with use_gpu where torch sees a GPU", None, None),
})
