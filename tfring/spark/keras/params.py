"""The Spark ML Params of KerasEstimator and KerasModel, with Horovod's getter/setter names (getNumProc, setEpochs,
getFeatureCols, ...), generated from one table per class."""
from pyspark.ml.param import TypeConverters

from tfring.spark.common.params import SHARED_ESTIMATOR_PARAMS, SHARED_MODEL_PARAMS, set_params, with_params

__all__ = ["ESTIMATOR_PARAMS", "MODEL_PARAMS", "set_params", "with_params"]

# The shared params (tfring.spark.common.params) and this framework's;
# name: (description, type converter or None, default).
ESTIMATOR_PARAMS = dict(SHARED_ESTIMATOR_PARAMS, **{
    "model": ("the Keras model to train (a keras.Model)", None, None),
    "optimizer": ("the Keras optimizer (default: the compiled model's); wrapped in tfring.keras.DistributedOptimizer",
                  None, None),
    "loss": ("Keras loss, or a list/dict of losses, one per output", None, None),
    "loss_weights": ("optional weights of the outputs' losses", None, None),
    "metrics": ("optional Keras metrics", None, None),
    "feature_cols": ("feature columns: one per model input, or several for a single-input model",
                     TypeConverters.toListString, None),
    "callbacks": ("Keras callbacks (must pickle); every rank runs them", None, []),
    "verbose": ("Keras verbosity on rank 0 (0, 1 or 2)", TypeConverters.toInt, 1),
    "random_seed": ("optional seed of the validation split, the shuffles and Keras' random state on the ranks",
                    None, None),
    "run_id": ("id of the run in the store (default: keras_<time>_<random>)", None, None),
    "custom_objects": ("custom Keras classes/functions by name, for (de)serializing the model", None, {}),
    "gradient_compression": ("tfring.Compression for the DistributedOptimizer's allreduces", None, None),
})

MODEL_PARAMS = dict(SHARED_MODEL_PARAMS, **{
    "history": ("the training history: metric name -> one value per epoch (averaged over the ranks)", None, None),
    "model": ("the trained Keras model", None, None),
    "custom_objects": ("custom Keras classes/functions by name", None, {}),
    "rank_digests": ("SHA-256 of every rank's final weights, in rank order", None, None),
})
