"""The function every rank of a KerasEstimator fit runs: rebuild the model, read its shard, train.

Everything it gets is plain data (model JSON, weights, Keras-serialized optimizer/loss/metrics, the Parquet
row-group list) plus the user's callbacks, so the job pickles without Keras objects that may not pickle.
"""
import math
import os

import numpy as np

from tfring.spark.common.job import weights_digest

__all__ = ["train", "weights_digest"]


def _deserialize(keras, value):
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return [_deserialize(keras, v) for v in value]
    if isinstance(value, dict) and "class_name" not in value:  # per-output {name: loss}
        return {k: _deserialize(keras, v) for k, v in value.items()}
    return keras.saving.deserialize_keras_object(value)


def _load_split(spec, units, rank, size):
    from tfring.spark.common import data
    cols = spec["feature_cols"] + spec["label_cols"] + ([spec["sample_weight_col"]] if spec["sample_weight_col"]
                                                       else [])
    table = data.read_shard(units, rank, size, cols)
    x = data.assemble_inputs([data.column_to_numpy(table, c) for c in spec["feature_cols"]], spec["feature_cols"],
                             spec["input_shapes"])
    y = data.assemble_labels([data.column_to_numpy(table, c) for c in spec["label_cols"]], spec["label_cols"],
                             spec["output_shapes"])
    if spec["sample_weight_col"]:
        w = data.column_to_numpy(table, spec["sample_weight_col"]).astype(np.float32)
        return (x, y, w), table.num_rows
    return (x, y), table.num_rows


def _step_counter(keras):
    """A callback counting the training steps of each epoch (what the driver reports per rank)."""
    class StepCounter(keras.callbacks.Callback):
        steps = None

        def on_epoch_begin(self, epoch, logs=None):
            self.current = 0

        def on_train_batch_end(self, batch, logs=None):
            self.current += 1

        def on_epoch_end(self, epoch, logs=None):
            self.steps = self.current
    return StepCounter()


def train(spec):
    """Trains on this rank's shard and returns what the driver needs.

    Args:
        spec: the job description the estimator builds (see KerasEstimator._job_spec).

    Returns:
        dict: rank, size, rows (this rank's training rows), steps (training steps it ran per epoch) and digest (of
        the final weights) on every rank;
        rank 0 adds weights (list of numpy arrays) and history (Keras' history.history).
    """
    import keras
    import tensorflow as tf

    import tfring.keras as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    verbose = spec["verbose"] if rank == 0 else 0
    seed = spec["random_seed"]
    if seed is not None:
        keras.utils.set_random_seed(seed)
    with keras.utils.custom_object_scope(spec["custom_objects"] or {}):
        model = keras.models.model_from_json(spec["model_json"])
        model.set_weights(spec["weights"])
        optimizer = keras.optimizers.deserialize(spec["optimizer"])
        loss, metrics = _deserialize(keras, spec["loss"]), _deserialize(keras, spec["metrics"])
    opt_args = {"compression": spec["gradient_compression"]} if spec["gradient_compression"] is not None else {}
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer, **opt_args), loss=loss,
                  loss_weights=spec["loss_weights"], metrics=metrics)

    train_data, rows = _load_split(spec, spec["train_units"], rank, size)
    ds = tf.data.Dataset.from_tensor_slices(train_data)
    if spec["shuffle"]:
        ds = ds.shuffle(rows, seed=None if seed is None else seed + rank, reshuffle_each_iteration=True)
    # Repeated, so that every rank runs exactly steps_per_epoch steps (the allreduces pair up) even when the
    # shards differ by a row; the driver computed the steps from the Parquet metadata.
    ds = ds.repeat().batch(spec["batch_size"]).prefetch(tf.data.AUTOTUNE)
    steps = spec["train_steps_per_epoch"] or max(1, math.ceil(spec["train_rows"] / (spec["batch_size"] * size)))

    val_ds = None
    if spec["val_units"]:
        # Evaluation runs no collective, so each rank evaluates its whole shard once; MetricAverageCallback
        # then averages the val_ metrics over the ranks.
        val_data, _ = _load_split(spec, spec["val_units"], rank, size)
        val_ds = tf.data.Dataset.from_tensor_slices(val_data).batch(spec["val_batch_size"])

    counter = _step_counter(keras)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(), counter]
    callbacks += list(spec["callbacks"] or [])
    if rank == 0:
        os.makedirs(spec["logs_path"], exist_ok=True)
        for cb in callbacks:
            if isinstance(cb, keras.callbacks.TensorBoard):
                cb.log_dir = spec["logs_path"]  # as Horovod: the store's logs directory
        callbacks.append(keras.callbacks.ModelCheckpoint(spec["checkpoint_path"]))
    history = model.fit(ds, epochs=spec["epochs"], steps_per_epoch=steps, validation_data=val_ds,
                        validation_steps=spec["validation_steps_per_epoch"], callbacks=callbacks, verbose=verbose,
                        shuffle=False)  # the dataset shuffles itself

    weights = model.get_weights()
    result = {"rank": rank, "size": size, "rows": rows, "steps": counter.steps, "digest": weights_digest(weights)}
    if rank == 0:
        result["weights"] = weights
        result["history"] = {k: [float(v) for v in vs] for k, vs in history.history.items()}
    return result
