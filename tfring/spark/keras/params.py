"""The Spark ML Params of KerasEstimator and KerasModel, with Horovod's getter/setter names (getNumProc, setEpochs,
getFeatureCols, ...), generated from one table per class."""
from pyspark.ml.param import TypeConverters

from tfring.spark.common.params import set_params, with_params

__all__ = ["ESTIMATOR_PARAMS", "MODEL_PARAMS", "set_params", "with_params"]

# name: (description, type converter or None, default)
ESTIMATOR_PARAMS = {
    "num_proc": ("number of ranks (default: the SparkContext's defaultParallelism)", None, None),
    "model": ("the Keras model to train (a keras.Model)", None, None),
    "optimizer": ("the Keras optimizer (default: the compiled model's); wrapped in tfring.keras.DistributedOptimizer",
                  None, None),
    "loss": ("Keras loss, or a list/dict of losses, one per output", None, None),
    "loss_weights": ("optional weights of the outputs' losses", None, None),
    "metrics": ("optional Keras metrics", None, None),
    "feature_cols": ("feature columns: one per model input, or several for a single-input model",
                     TypeConverters.toListString, None),
    "label_cols": ("label columns, one per model output", TypeConverters.toListString, None),
    "sample_weight_col": ("optional column of per-row sample weights", None, None),
    "validation": ("optional fraction (0 < v < 1) of rows held out at random, or a column name whose true/1 rows "
                   "are the validation set", None, None),
    "callbacks": ("Keras callbacks (must pickle); every rank runs them", None, []),
    "batch_size": ("rows per batch, per rank", TypeConverters.toInt, 32),
    "val_batch_size": ("rows per validation batch (default: batch_size)", None, None),
    "epochs": ("number of epochs", TypeConverters.toInt, 1),
    "verbose": ("Keras verbosity on rank 0 (0, 1 or 2)", TypeConverters.toInt, 1),
    "random_seed": ("optional seed of the validation split, the shuffles and Keras' random state on the ranks",
                    None, None),
    "shuffle": ("shuffle each rank's training rows every epoch", TypeConverters.toBoolean, True),
    "partitions_per_process": ("Parquet files written per rank", TypeConverters.toInt, 10),
    "run_id": ("id of the run in the store (default: keras_<time>_<random>)", None, None),
    "train_steps_per_epoch": ("optional steps per epoch (default: training rows / (batch_size * num_proc))",
                              None, None),
    "validation_steps_per_epoch": ("optional validation steps per epoch (default: each rank's whole shard)",
                                   None, None),
    "store": ("a tfring.spark.common.Store or a path (default: a new temporary directory)", None, None),
    "custom_objects": ("custom Keras classes/functions by name, for (de)serializing the model", None, {}),
    "gradient_compression": ("tfring.Compression for the DistributedOptimizer's allreduces", None, None),
    "backend_env": ("environment variables added for the ranks", None, {}),
    "backend": ("a tfring.spark.common.backend.Backend (e.g. SparkBackend) that runs the ranks; sets num_proc",
                None, None),
    "inmemory_cache_all": ("accepted for Horovod's scripts: each rank always holds its shard in memory", None, False),
}

MODEL_PARAMS = {
    "history": ("the training history: metric name -> one value per epoch (averaged over the ranks)", None, None),
    "model": ("the trained Keras model", None, None),
    "feature_columns": ("the feature columns", TypeConverters.toListString, None),
    "label_columns": ("the label columns", TypeConverters.toListString, None),
    "output_cols": ("the prediction columns (default: <label>__output)", TypeConverters.toListString, None),
    "run_id": ("the id of the run that trained the model", None, None),
    "custom_objects": ("custom Keras classes/functions by name", None, {}),
    "rank_digests": ("SHA-256 of every rank's final weights, in rank order", None, None),
    "rank_rows": ("the training rows each rank read, in rank order", None, None),
    "rank_steps": ("the training steps each rank ran per epoch, in rank order", None, None),
}
