"""TorchEstimator: fit a torch module on a Spark DataFrame with tfring (Horovod's horovod.spark.torch)."""
import copy
import numbers
import os

import numpy as np
import pyarrow.parquet as pq
import torch
from pyspark.ml import Estimator

from tfring.spark.common import job
from tfring.spark.common.data import column_to_numpy
from tfring.spark.common.params import set_params, with_params
from tfring.spark.torch import remote
from tfring.spark.torch.model import TorchModel
from tfring.spark.torch.params import ESTIMATOR_PARAMS

# Horovod TorchEstimator arguments tfring does not implement, with the value that means "not used".
UNSUPPORTED = {"data_module": None, "continuous_cols": None, "categorical_cols": None,
               "shuffle_buffer_size": None, "transformation_fn": None, "train_reader_num_workers": None,
               "val_reader_num_workers": None, "reader_pool_type": "thread", "label_shapes": None,
               "mp_start_method": None}
CHECKPOINT = "checkpoint.pt"


def _as_list(value):
    return None if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def _input_shapes(given, first_row):
    """Each feature column's shape with the batch first (-1): the given one, else (-1, values per row)."""
    if given is None:
        return [[-1, int(np.prod(a.shape[1:], dtype=np.int64)) if a.ndim > 1 else 1] for a in first_row]
    return [list(s) if list(s)[:1] == [-1] else [-1] + list(s) for s in given]


def dry_run(owner, model, feature_cols, input_shapes, labels, units):
    """Shapes the first staged row as the ranks will and runs the model on it, still on the driver.

    Args:
        owner: the estimator's class name, for messages.
        model: the torch module.
        feature_cols: the feature columns, one per forward() argument.
        input_shapes: the given input shapes, or None.
        labels: the number of label columns (the model's outputs).
        units: `data.row_group_units()` of the training data.

    Returns:
        list: the input shapes (-1 first) the ranks use.

    Raises:
        ValueError: a column does not fit its shape, forward() fails, or it returns another number of outputs.
    """
    f, i, _ = units[0]
    table = pq.ParquetFile(f).read_row_group(i, columns=feature_cols).slice(0, 1)
    arrays = [column_to_numpy(table, c).astype(np.float32) for c in feature_cols]
    shapes = _input_shapes(input_shapes, arrays)
    inputs = []
    for name, array, shape in zip(feature_cols, arrays, shapes):
        try:
            x = torch.from_numpy(array).reshape(shape)
        except RuntimeError:
            x = None
        if x is None or x.shape[0] != 1:
            raise ValueError("%s: column %s holds %d value(s) per row; input_shapes gives %s"
                             % (owner, name, array.size, shape))
        inputs.append(x)
    training = model.training
    device = next(iter(model.parameters()), torch.empty(0)).device  # a model the user put on a GPU
    try:
        model.eval()
        with torch.no_grad():
            outputs = model(*[x.to(device) for x in inputs])
    except Exception as e:
        raise ValueError("%s: the model's forward() fails on the first staged row: %s: %s"
                         % (owner, type(e).__name__, e)) from None
    finally:
        model.train(training)
    count = len(outputs) if isinstance(outputs, (list, tuple)) else 1
    if count != labels:
        raise ValueError("%s: label_cols has %d column(s), the model %d output(s)" % (owner, labels, count))
    return shapes


@with_params(ESTIMATOR_PARAMS)
@job.shared_docs
class TorchEstimator(Estimator):
    """Spark Estimator that fits a torch module to a DataFrame with tfring (Horovod's `TorchEstimator`).

    `fit(df)` stages the feature/label columns as Parquet files in the store, runs `num_proc` ranks that each
    read their shard (a contiguous slice of the rows, held in memory) and train with
    `tfring.torch.DistributedOptimizer`, starting from rank 0's parameters and optimizer state, and returns a
    `TorchModel`. As in Horovod: the optimizer's learning rate is multiplied by `num_proc` on the ranks (the
    checkpoint and the returned optimizer hold the unscaled rate); an epoch is floor(training rows / (batch_size *
    num_proc)) steps of full batches; labels reach the loss and metrics as float32 tensors (a class-index loss
    converts them: `loss=lambda out, y: F.cross_entropy(out, y.long())`); the history is one dict per epoch,
    `{"epoch": e, "train": {"loss": l, "all_metrics": [{"group_<g>_<label>": v}]}, "validation": {...}}`, averaged
    over the ranks; rank 0 saves `{"model": state_dict, "optimizer": state_dict}` to
    `<store>/runs/<run_id>/checkpoint.pt` after every epoch, and a fit whose run_id already has a checkpoint
    resumes from it. Unlike Horovod, loss and metrics are averaged over the rows of the epoch (Horovod: over its
    batches, the same for full batches), and each rank validates its whole validation shard by default.

    Of Horovod's arguments these are not supported and raise ValueError when set: data_module,
    continuous_cols, categorical_cols, shuffle_buffer_size, transformation_fn, train_reader_num_workers,
    val_reader_num_workers, reader_pool_type, label_shapes and mp_start_method. The store is a local or shared
    filesystem path, and the estimator and model are not MLWritable.

    Args:
        num_proc: number of ranks (default: the SparkContext's defaultParallelism).
        model: the `torch.nn.Module` to train (it travels cloudpickled; its forward() takes one tensor per
            feature column).
        optimizer: a `torch.optim.Optimizer` over the model's parameters (its class and state_dict travel).
        loss: loss(output, label) (e.g. `torch.nn.functional.mse_loss`), or a list with one per label column; with
            sample_weight_col it is called with `reduction="none"`.
        loss_constructors: instead of loss: functions without arguments that return the loss function(s).
        loss_weights: optional list of weights, one per label column (default: 1 / number of label columns).
        metrics: optional list of metric groups, each a list of metric(output, label) functions (one for every
            output, or one per output); a bare function is a group of its own.
        sample_weight_col: optional column of per-row sample weights.
        gradient_compression: `tfring.torch.Compression.fp16` for the gradients' allreduces.
        feature_cols: feature columns, one per argument of the model's forward().
        input_shapes: optional shape per feature column, with or without the batch dimension first as -1 (e.g.
            `[[-1, 1, 8, 8]]`); default: (-1, values per row).
        label_cols: label columns, one per model output.
        validation: optional fraction (0 < v < 1) of rows held out at random, or the name of a column whose
            true/1 rows form the validation set.
        callbacks: objects with `on_epoch_end(epoch, logs)` (logs: the epoch's history entry), called on every rank
            after each epoch; `set_model(model)` is called first when they have it. They must pickle.
        batch_size: rows per batch and rank (default 32).
        val_batch_size: rows per validation batch (default: batch_size).
        epochs: number of epochs (default 1).
        verbose: rank 0 prints each epoch's metrics when > 0 (default 1); 0 also silences the ranks' output.
        random_seed: optional seed of the validation split, of torch and of the shuffles on the ranks.
        shuffle: shuffle each rank's rows every epoch (default True).
        partitions_per_process: Parquet files written per rank (default 10).
        run_id: the run's id in the store (default `pytorch_<time>_<random>`).
        train_minibatch_fn: optional replacement of the per-batch training function, with Horovod's signature
            `(model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights,
            backward_passes_per_step, batch_idx) -> (outputs, loss)` (see `tfring.spark.torch.remote`).
        train_steps_per_epoch: steps per epoch (default: training rows / (batch_size * num_proc), rounded down).
        validation_steps_per_epoch: validation batches per epoch and rank (default: the whole shard).
        store: a `tfring.spark.common.Store`, or a path for `Store.create` (default: a new temporary directory).
        backward_passes_per_step: backward passes accumulated locally before each allreduce (default 1).
        use_gpu: train on the GPU of each rank's local rank when torch sees one (default True).
        {backend_args}
        **unsupported: Horovod arguments tfring does not implement (see above).

    Raises:
        ValueError: an unsupported Horovod argument is set, an unknown argument is given, or both loss and
            loss_constructors are. `fit` raises ValueError for arguments that do not fit the DataFrame or model
            before it launches the ranks (missing/unsupported columns, too few rows, input_shapes that do not fit
            the columns, a model whose forward() fails on the first row or returns another number of outputs than
            label_cols), and RuntimeError (from `tfring.spark.run`, naming the rank) when a rank fails.
    """

    def __init__(self, *, num_proc=None, model=None, optimizer=None, loss=None, loss_constructors=None,
                 loss_weights=None, metrics=None, sample_weight_col=None, gradient_compression=None,
                 feature_cols=None, input_shapes=None, label_cols=None, validation=None, callbacks=None,
                 batch_size=None, val_batch_size=None, epochs=None, verbose=None, random_seed=None, shuffle=None,
                 partitions_per_process=None, run_id=None, train_minibatch_fn=None, train_steps_per_epoch=None,
                 validation_steps_per_epoch=None, store=None, backward_passes_per_step=None, use_gpu=None,
                 backend_env=None, backend=None, inmemory_cache_all=None, **unsupported):
        super().__init__()
        job.check_unsupported("TorchEstimator", UNSUPPORTED, unsupported)
        if loss is not None and loss_constructors is not None:
            raise ValueError("TorchEstimator: only one of loss and loss_constructors can be given")
        given = dict(locals())
        set_params(self, ESTIMATOR_PARAMS, {n: given[n] for n in ESTIMATOR_PARAMS})

    def _check(self, df):
        """Checks every argument against the DataFrame before anything is written or launched."""
        if not isinstance(self.getModel(), torch.nn.Module):
            raise ValueError("TorchEstimator: model must be a torch.nn.Module, got %r" % (self.getModel(),))
        if not isinstance(self.getOptimizer(), torch.optim.Optimizer):
            raise ValueError("TorchEstimator: optimizer must be a torch.optim.Optimizer over the model's "
                             "parameters, got %r" % (self.getOptimizer(),))
        if not self.getLoss() and not self.getLossConstructors():
            raise ValueError("TorchEstimator: loss (or loss_constructors) is required")
        job.check_data_args("TorchEstimator", self, df)
        labels = len(self.getLabelCols())
        for name in ("loss", "loss_constructors"):
            fns = _as_list(self.getOrDefault(name))
            if fns is not None and (len(fns) not in (1, labels) or not all(callable(f) for f in fns)):
                raise ValueError("TorchEstimator: %s must be one function or one per label column (%d)"
                                 % (name, labels))
        weights = self.getLossWeights()
        if weights is not None and (not isinstance(weights, (list, tuple)) or len(weights) != labels):
            raise ValueError("TorchEstimator: loss_weights must be a list with one weight per label column (%d)"
                             % labels)
        shapes = self.getInputShapes()
        if shapes is not None and (not isinstance(shapes, (list, tuple)) or len(shapes) != len(self.getFeatureCols())):
            raise ValueError("TorchEstimator: input_shapes must hold one shape per feature column (%d)"
                             % len(self.getFeatureCols()))
        for cb in self.getCallbacks() or []:
            if not callable(getattr(cb, "on_epoch_end", None)):
                raise ValueError("TorchEstimator: callback %r has no on_epoch_end(epoch, logs) method" % (cb,))
        value = self.getBackwardPassesPerStep()
        if not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError("TorchEstimator: backward_passes_per_step=%r must be a positive integer" % (value,))

    def _metric_groups(self):
        return [g if isinstance(g, (list, tuple)) else [g] for g in self.getMetrics() or []]

    def _dry_run(self, units):
        return dry_run("TorchEstimator", self.getModel(), self.getFeatureCols(), self.getInputShapes(),
                       len(self.getLabelCols()), units)

    def _fit(self, df):
        self._check(df)
        num_proc, store, run_id = job.resolve_run(self, df, "pytorch")
        train_units, val_units, train_rows, _ = job.stage_data("TorchEstimator", self, df, store, run_id, num_proc)
        input_shapes = self._dry_run(train_units)
        checkpoint_path = os.path.join(store.get_run_path(run_id), CHECKPOINT)
        resume = torch.load(checkpoint_path, map_location="cpu") if os.path.exists(checkpoint_path) else None
        optimizer = self.getOptimizer()
        labels = len(self.getLabelCols())
        spec = {
            "model": self.getModel(), "model_state": resume and resume["model"],
            "optimizer_cls": type(optimizer),
            "optimizer_state": resume["optimizer"] if resume else optimizer.state_dict(),
            "loss_fns": _as_list(self.getLoss()), "loss_constructors": _as_list(self.getLossConstructors()),
            "loss_weights": list(self.getLossWeights() or [1.0 / labels] * labels),
            "metrics": self._metric_groups(), "gradient_compression": self.getGradientCompression(),
            "callbacks": self.getCallbacks(), "train_minibatch_fn": self.getTrainMinibatchFn(),
            "feature_cols": self.getFeatureCols(), "label_cols": self.getLabelCols(),
            "sample_weight_col": self.getSampleWeightCol(), "input_shapes": input_shapes,
            "train_units": train_units, "val_units": val_units, "train_rows": train_rows,
            "batch_size": self.getBatchSize(), "val_batch_size": self.getValBatchSize() or self.getBatchSize(),
            "epochs": self.getEpochs(), "verbose": self.getVerbose(), "random_seed": self.getRandomSeed(),
            "shuffle": self.getShuffle(), "train_steps_per_epoch": self.getTrainStepsPerEpoch(),
            "validation_steps_per_epoch": self.getValidationStepsPerEpoch(),
            "backward_passes_per_step": self.getBackwardPassesPerStep(), "use_gpu": self.getUseGpu(),
            "checkpoint_path": checkpoint_path,
        }
        results = job.run_job(remote.train, spec, num_proc, self.getBackendEnv(), self.getVerbose(),
                              self.getBackend())
        state = results[0]["state"]
        trained = copy.deepcopy(self.getModel()).cpu()
        trained.load_state_dict(state["model"])
        trained.eval()
        trained_optimizer = type(optimizer)(trained.parameters(), lr=1)
        trained_optimizer.load_state_dict(state["optimizer"])
        return TorchModel(history=results[0]["history"], model=trained, optimizer=trained_optimizer,
                          loss=self.getLoss(), loss_constructors=self.getLossConstructors(),
                          feature_columns=self.getFeatureCols(), input_shapes=input_shapes,
                          label_columns=self.getLabelCols(), run_id=run_id,
                          rank_digests=[r["digest"] for r in results], rank_rows=[r["rows"] for r in results],
                          rank_steps=[r["steps"] for r in results])
