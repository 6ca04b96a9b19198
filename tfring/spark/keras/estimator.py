"""KerasEstimator (fit a Keras model on a Spark DataFrame with tfring) and KerasModel (its Spark transformer)."""
import math
import numbers
import uuid
from typing import Iterator

import keras
import pandas as pd
from pyspark.ml import Estimator, Model
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tfring.spark.common import job, prepare
from tfring.spark.common.data import check_first_row
from tfring.spark.keras import remote
from tfring.spark.keras.params import ESTIMATOR_PARAMS, MODEL_PARAMS, set_params, with_params

# Horovod KerasEstimator arguments tfring does not implement, with the value that means "not used".
UNSUPPORTED = {"transformation_fn": None, "train_reader_num_workers": None,
               "val_reader_num_workers": None, "reader_pool_type": "thread", "label_shapes": None,
               "checkpoint_callback": None, "use_gpu": True, "mp_start_method": None,
               "shuffle_buffer_size": None, "compress_sparse_cols": False}


def _serialize(value):
    """Losses/metrics as Keras-serialized configs (names stay strings), so they travel as plain data."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return [_serialize(v) for v in value]
    if isinstance(value, dict):
        return {k: _serialize(v) for k, v in value.items()}
    return keras.saving.serialize_keras_object(value)


def _shape(tensor):
    return tuple(tensor.shape[1:])


@with_params(ESTIMATOR_PARAMS)
@job.shared_docs
class KerasEstimator(Estimator):
    """Spark Estimator that fits a Keras model to a DataFrame with tfring (Horovod's `KerasEstimator`).

    `fit(df)` stages the feature/label columns as Parquet files in the store, runs `num_proc` ranks that each
    read their shard (a contiguous slice of the rows) and train with `tfring.keras.DistributedOptimizer`,
    starting from rank 0's weights, and returns a `KerasModel`. The learning rate is multiplied by `num_proc`
    on the ranks, as in Horovod (a learning-rate schedule is left as it is). Feature columns may hold numbers,
    arrays of numbers or `pyspark.ml.linalg` vectors; they are reshaped to the model's input shapes.

    Of Horovod's arguments these are not supported and raise ValueError when set: transformation_fn,
    train_reader_num_workers, val_reader_num_workers, reader_pool_type, label_shapes, checkpoint_callback, use_gpu,
    mp_start_method,
    shuffle_buffer_size and compress_sparse_cols. The store is a local or shared filesystem path (no HDFS), a
    pre-trained optimizer's state is not carried over, and the estimator and model are not MLWritable.

    Args:
        num_proc: number of ranks (default: the SparkContext's defaultParallelism).
        model: the `keras.Model` to train (functional or Sequential: it travels as `to_json()` and weights).
        optimizer: a Keras optimizer or its name (default: the compiled model's optimizer).
        loss: a Keras loss (name, function or object), or a list/dict with one per output.
        loss_weights: optional weights of the outputs' losses.
        metrics: optional list of Keras metrics.
        feature_cols: feature columns, one per model input (or several for a single-input model).
        label_cols: label columns, one per model output.
        sample_weight_col: optional column of per-row sample weights.
        validation: optional fraction (0 < v < 1) of rows held out at random, or the name of a column whose
            true/1 rows form the validation set.
        callbacks: Keras callbacks run on every rank (they must pickle); a TensorBoard callback writes to the
            store's logs directory.
        batch_size: rows per batch and rank (default 32).
        val_batch_size: rows per validation batch (default: batch_size).
        epochs: number of epochs (default 1).
        verbose: Keras verbosity of rank 0 (default 1); 0 also silences the ranks' output.
        random_seed: optional seed of the validation split, the shuffles and Keras' random state.
        shuffle: shuffle each rank's rows every epoch (default True).
        partitions_per_process: Parquet files written per rank (default 10).
        run_id: the run's id in the store (default `keras_<time>_<random>`).
        train_steps_per_epoch: steps per epoch (default: training rows / (batch_size * num_proc), rounded up).
        validation_steps_per_epoch: validation steps per epoch (default: each rank's whole validation shard).
        store: a `tfring.spark.common.Store`, or a path for `Store.create` (default: a new temporary directory).
        custom_objects: {name: class or function} needed to rebuild the model, loss or metrics.
        gradient_compression: `tfring.Compression.fp16`/`.bf16` for the gradients' allreduces.
        {backend_args}
        **unsupported: Horovod arguments tfring does not implement (see above).

    Raises:
        ValueError: an unsupported Horovod argument is set, or an unknown argument is given. `fit` raises
            ValueError for arguments that do not fit the DataFrame or model before it launches the ranks
            (missing/unsupported columns, too few rows, columns that do not reshape to the model's inputs), and
            RuntimeError (from `tfring.spark.run`, naming the rank) when a rank fails.
    """

    def __init__(self, *, num_proc=None, model=None, optimizer=None, loss=None, loss_weights=None, metrics=None,
                 feature_cols=None, label_cols=None, sample_weight_col=None, validation=None, callbacks=None,
                 batch_size=None, val_batch_size=None, epochs=None, verbose=None, random_seed=None, shuffle=None,
                 partitions_per_process=None, run_id=None, train_steps_per_epoch=None,
                 validation_steps_per_epoch=None, store=None, custom_objects=None, gradient_compression=None,
                 backend_env=None, backend=None, inmemory_cache_all=None, **unsupported):
        super().__init__()
        job.check_unsupported("KerasEstimator", UNSUPPORTED, unsupported)
        given = dict(locals())
        set_params(self, ESTIMATOR_PARAMS, {n: given[n] for n in ESTIMATOR_PARAMS})

    def _check(self, df):
        """Checks every argument against the DataFrame before anything is written or launched."""
        model = self.getModel()
        if not isinstance(model, keras.Model):
            raise ValueError("KerasEstimator: model must be a keras.Model, got %r" % (model,))
        if self.getOptimizer() is None and getattr(model, "optimizer", None) is None:
            raise ValueError("KerasEstimator: optimizer is required (or a model compiled with one)")
        if not self.getLoss():
            raise ValueError("KerasEstimator: loss is required")
        job.check_data_args("KerasEstimator", self, df)
        if len(self.getLabelCols()) != len(model.outputs):
            raise ValueError("KerasEstimator: label_cols has %d column(s), the model %d output(s)"
                             % (len(self.getLabelCols()), len(model.outputs)))
        if len(self.getFeatureCols()) != len(model.inputs) and len(model.inputs) != 1:
            raise ValueError("KerasEstimator: feature_cols has %d column(s), the model %d inputs"
                             % (len(self.getFeatureCols()), len(model.inputs)))

    def _optimizer_config(self, num_proc):
        optimizer = self.getOptimizer() or self.getModel().optimizer
        if isinstance(optimizer, str):
            optimizer = keras.optimizers.get(optimizer)
        config = keras.optimizers.serialize(optimizer)
        lr = config["config"].get("learning_rate")
        if isinstance(lr, numbers.Real):  # Horovod scales the learning rate with the number of ranks
            config["config"]["learning_rate"] = float(lr) * num_proc
        return keras.optimizers.serialize(optimizer), config

    def _fit(self, df):
        self._check(df)
        num_proc, store, run_id = job.resolve_run(self, df, "keras")
        train_units, val_units, train_rows, _ = job.stage_data("KerasEstimator", self, df, store, run_id, num_proc)
        model = self.getModel()
        input_shapes, output_shapes = [_shape(t) for t in model.inputs], [_shape(t) for t in model.outputs]
        try:
            check_first_row(train_units, self.getFeatureCols(), self.getLabelCols(), input_shapes, output_shapes)
        except ValueError as e:
            raise ValueError("KerasEstimator: %s" % e) from None
        optimizer_config, scaled_config = self._optimizer_config(num_proc)
        spec = {
            "model_json": model.to_json(), "weights": model.get_weights(), "optimizer": scaled_config,
            "loss": _serialize(self.getLoss()), "loss_weights": self.getLossWeights(),
            "metrics": _serialize(self.getMetrics()), "custom_objects": self.getCustomObjects(),
            "gradient_compression": self.getGradientCompression(), "callbacks": self.getCallbacks(),
            "feature_cols": self.getFeatureCols(), "label_cols": self.getLabelCols(),
            "sample_weight_col": self.getSampleWeightCol(),
            "input_shapes": input_shapes, "output_shapes": output_shapes,
            "train_units": train_units, "val_units": val_units, "train_rows": train_rows,
            "batch_size": self.getBatchSize(), "val_batch_size": self.getValBatchSize() or self.getBatchSize(),
            "epochs": self.getEpochs(), "verbose": self.getVerbose(), "random_seed": self.getRandomSeed(),
            "shuffle": self.getShuffle(), "train_steps_per_epoch": self.getTrainStepsPerEpoch(),
            "validation_steps_per_epoch": self.getValidationStepsPerEpoch() if val_units else None,
            "checkpoint_path": store.get_checkpoint_path(run_id), "logs_path": store.get_logs_path(run_id),
        }
        results = job.run_job(remote.train, spec, num_proc, self.getBackendEnv(), self.getVerbose(),
                              self.getBackend())
        with keras.utils.custom_object_scope(self.getCustomObjects() or {}):
            trained = keras.models.model_from_json(spec["model_json"])
            trained.set_weights(results[0]["weights"])
            # The unscaled optimizer, fresh: the model can be evaluated or trained further on one process.
            trained.compile(optimizer=keras.optimizers.deserialize(optimizer_config),
                            loss=remote._deserialize(keras, spec["loss"]), loss_weights=spec["loss_weights"],
                            metrics=remote._deserialize(keras, spec["metrics"]))
        return KerasModel(history=results[0]["history"], model=trained, feature_columns=self.getFeatureCols(),
                          label_columns=self.getLabelCols(), run_id=run_id,
                          custom_objects=self.getCustomObjects(), rank_digests=[r["digest"] for r in results],
                          rank_rows=[r["rows"] for r in results], rank_steps=[r["steps"] for r in results])


@with_params(MODEL_PARAMS)
class KerasModel(Model):
    """Spark Transformer wrapping a trained Keras model: `transform(df)` adds one prediction column per output.

    A prediction column holds the model's output for the row: a double when the output has one value per
    row, else an array<float> of the output's values (flattened). Prediction runs in a pandas UDF that
    rebuilds the model once per Python worker from a broadcast of its JSON and weights. The trained model is
    `getModel()` (or `keras()`); the training history `getHistory()`.

    Args:
        history: metric name -> one value per epoch.
        model: the trained keras.Model.
        feature_columns: the feature columns, in the model's input order.
        label_columns: the label columns, one per output (they name the default output columns).
        output_cols: the prediction columns (default `<label>__output`).
        run_id: the id of the run in the store.
        custom_objects: custom Keras classes/functions needed to rebuild the model.
        rank_digests: SHA-256 of every rank's final weights, in rank order.
        rank_rows: the training rows each rank read, in rank order (their sum is the training set).
        rank_steps: the training steps each rank ran per epoch, in rank order (the same on every rank).
    """

    def __init__(self, *, history=None, model=None, feature_columns=None, label_columns=None, output_cols=None,
                 run_id=None, custom_objects=None, rank_digests=None, rank_rows=None, rank_steps=None):
        super().__init__()
        if output_cols is None and label_columns:
            output_cols = [c + "__output" for c in label_columns]
        given = dict(locals())
        set_params(self, MODEL_PARAMS, {n: given[n] for n in MODEL_PARAMS})

    def keras(self):
        """The trained Keras model (as `getModel()`).

        Returns:
            keras.Model.
        """
        return self.getModel()

    def _transform(self, df):
        from tfring.spark.keras import predict

        model, feature_cols, output_cols = self.getModel(), self.getFeatureColumns(), self.getOutputCols()
        prepare.check_columns(df.schema, "feature_columns", feature_cols)
        if len(output_cols) != len(model.outputs):
            raise ValueError("KerasModel: output_cols has %d name(s), the model %d output(s)"
                             % (len(output_cols), len(model.outputs)))
        scalar = [math.prod(d or 2 for d in _shape(t)) == 1 for t in model.outputs]
        types = [T.DoubleType() if s else T.ArrayType(T.FloatType()) for s in scalar]
        return_type = types[0] if len(types) == 1 else T.StructType(
            [T.StructField(n, t) for n, t in zip(output_cols, types)])
        broadcast = df.sparkSession.sparkContext.broadcast((model.to_json(), model.get_weights()))
        args = (uuid.uuid4().hex, broadcast, self.getCustomObjects(), feature_cols,
                [_shape(t) for t in model.inputs], output_cols, scalar, 256)

        def predict_udf(frames):
            return predict.predict_frames(frames, *args)

        # Type hints make it an iterator pandas UDF: the model is rebuilt once per partition, not per batch.
        predict_udf.__annotations__ = {"frames": Iterator[pd.DataFrame],
                                       "return": Iterator[pd.Series if len(types) == 1 else pd.DataFrame]}
        udf = F.pandas_udf(predict_udf, return_type)
        features = F.struct(*[prepare.feature_expr(df.schema, c) for c in feature_cols])
        if len(output_cols) == 1:
            return df.withColumn(output_cols[0], udf(features))
        tmp = "__tfring_predictions_%s" % uuid.uuid4().hex[:8]
        out = df.withColumn(tmp, udf(features))
        return out.withColumns({n: F.col(tmp)[n] for n in output_cols}).drop(tmp)
