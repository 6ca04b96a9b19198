"""LightningEstimator: fit a PyTorch Lightning 2.x LightningModule on a Spark DataFrame with tfring (Horovod's
horovod.spark.lightning.TorchEstimator, which is stuck on Lightning 1.5)."""
import copy
import numbers
import os

import torch
from pyspark.ml import Estimator

from tfring.spark.common import job
from tfring.spark.common.params import set_params, with_params
from tfring.spark.lightning import remote
from tfring.spark.lightning.params import ESTIMATOR_PARAMS
from tfring.spark.torch.estimator import dry_run
from tfring.spark.torch.model import TorchModel

# Horovod arguments tfring does not implement, with the value that means "not used".
UNSUPPORTED = {"optimizer": None, "loss": None, "loss_constructors": None, "loss_weights": None,
               "metrics": None, "train_minibatch_fn": None, "data_module": None, "loader_num_epochs": None,
               "shuffle_buffer_size": None, "transformation_fn": None, "transformation_edit_fields": None,
               "transformation_removed_fields": None, "train_reader_num_workers": None,
               "val_reader_num_workers": None, "reader_pool_type": None, "label_shapes": None,
               "debug_data_loader": False, "train_async_data_loader_queue_size": None,
               "val_async_data_loader_queue_size": None, "mp_start_method": None}
CHECKPOINT = "checkpoint.ckpt"


class LightningModel(TorchModel):
    """Spark Transformer wrapping the trained LightningModule (`LightningEstimator.fit` returns it).

    The same as `tfring.spark.torch.TorchModel`: `transform(df)` adds one prediction column per output of the
    module's forward() (a double, or an array<float>), `getModel()` is the trained module (eval mode, on the CPU),
    `getHistory()` one dict per epoch of the metrics the module logged, averaged over the ranks, and
    `getRankDigests()` every rank's final weights' SHA-256. `getOptimizer()` is None (the optimizers belong to the
    module; their state is in the checkpoint).

    Args:
        **kwargs: TorchModel's arguments.
    """


@with_params(ESTIMATOR_PARAMS)
@job.shared_docs
class LightningEstimator(Estimator):
    """Spark Estimator that fits a LightningModule to a DataFrame with tfring (Horovod's Lightning TorchEstimator).

    `fit(df)` stages the feature/label columns as Parquet files in the store and runs `num_proc` ranks (Spark tasks,
    through `tfring.spark.run`). Each reads its shard (a contiguous slice of the rows, held in memory) and runs
    Lightning's `Trainer.fit` on the CPU with a tfring strategy (`tfring.spark.lightning.strategy`): rank 0's weights
    broadcast at the start, the gradients averaged over the ranks before every optimizer step, the learning rates
    (and the schedulers' base rates) multiplied by `num_proc`, as Horovod's Lightning strategy did. The batches
    `training_step(batch, batch_idx)` and `validation_step` get are dicts with one float32 tensor per feature
    column (shaped by `input_shapes`), label column and sample weight column, as Horovod's data module gives them.
    An epoch is floor(training rows / (batch_size * num_proc)) full batches on every rank; each rank validates its
    whole validation shard (in the same number of batches on every rank). After every epoch rank 0 writes the
    Trainer's checkpoint to `<store>/runs/<run_id>/checkpoint.ckpt`; a fit whose run_id already has one resumes
    from it (weights, optimizer state, epoch) for `epochs` more epochs. The history is one dict per epoch,
    `{"epoch": e, <logged metric>: value}`, from the Trainer's callback metrics averaged over the ranks (Horovod
    returns the last epoch's logged metrics).

    Of Horovod's arguments these raise ValueError when set: optimizer, loss, loss_constructors,
    loss_weights and metrics (a LightningModule brings its own: as Horovod, which refuses the first three with one),
    train_minibatch_fn, data_module, loader_num_epochs, shuffle_buffer_size, transformation_fn,
    transformation_edit_fields, transformation_removed_fields, train/val_reader_num_workers, reader_pool_type,
    label_shapes, debug_data_loader, train/val_async_data_loader_queue_size and
    mp_start_method. A plain torch module (Horovod's legacy mode) is refused: use `tfring.spark.torch`.

    Args:
        num_proc: number of ranks (default: the SparkContext's defaultParallelism).
        model: the LightningModule (from `lightning.pytorch` or `pytorch_lightning` >= 2.0); it travels
            cloudpickled, its forward() takes one tensor per feature column (used by `transform`).
        sample_weight_col: optional column of per-row sample weights (in the batch dict).
        gradient_compression: `tfring.torch.Compression.fp16` for the gradients' allreduces.
        feature_cols: feature columns, one per argument of the module's forward().
        input_shapes: optional shape per feature column, with or without -1 first (default: (-1, values per row)).
        label_cols: label columns, one per module output.
        validation: optional fraction (0 < v < 1) of rows held out at random, or the name of a column whose
            true/1 rows form the validation set.
        callbacks: Lightning callbacks (each rank gets its copy); a ModelCheckpoint without dirpath writes into the
            run's directory in the store.
        batch_size: rows per batch and rank (default 32).
        val_batch_size: rows per validation batch (default: batch_size).
        epochs: number of epochs (default 1).
        verbose: rank 0 prints the Trainer's model summary and one line per epoch when > 0 (default 1); 0 also
            silences the ranks' output.
        random_seed: optional seed of the validation split, `seed_everything` on the ranks and their shuffles.
        shuffle: shuffle each rank's training rows (default True).
        partitions_per_process: Parquet files written per rank (default 10).
        run_id: the run's id in the store (default `lightning_<time>_<random>`).
        train_steps_per_epoch: steps per epoch (default: training rows / (batch_size * num_proc), rounded down).
        validation_steps_per_epoch: validation batches per epoch and rank (default: the whole shard).
        store: a `tfring.spark.common.Store`, or a path for `Store.create` (default: a new temporary directory).
        use_gpu: train on the GPU of each rank's local rank when torch sees one (default True; untested here).
        {backend_args}
        trainer_args: dict of `Trainer` arguments added to (or overriding) the estimator's.
        logger: a Lightning logger (default: Lightning's default one, in `<store>/runs/<run_id>/logs`).
        log_every_n_steps: the Trainer's logging interval (default 50).
        terminate_on_nan: raise when a parameter is not finite after a training step (default False).
        profiler: a Lightning profiler, or its name ('simple', 'advanced').
        num_gpus: None, 0 or 1 (one device per rank).
        **unsupported: Horovod arguments tfring does not implement (see above).

    Raises:
        ValueError: an unsupported Horovod argument is set or an unknown one is given. `fit` raises ValueError
            for arguments that do not fit the DataFrame or module before it launches the ranks, and RuntimeError
            (from `tfring.spark.run`, naming the rank) when a rank fails.
    """

    def __init__(self, *, num_proc=None, model=None, sample_weight_col=None, gradient_compression=None,
                 feature_cols=None, input_shapes=None, label_cols=None, validation=None, callbacks=None,
                 batch_size=None, val_batch_size=None, epochs=None, verbose=None, random_seed=None, shuffle=None,
                 partitions_per_process=None, run_id=None, train_steps_per_epoch=None,
                 validation_steps_per_epoch=None, store=None, use_gpu=None, backend_env=None, backend=None,
                 inmemory_cache_all=None, trainer_args=None,
                 logger=None, log_every_n_steps=None, terminate_on_nan=None, profiler=None, num_gpus=None,
                 **unsupported):
        super().__init__()
        job.check_unsupported("LightningEstimator", UNSUPPORTED, unsupported)
        given = dict(locals())
        set_params(self, ESTIMATOR_PARAMS, {n: given[n] for n in ESTIMATOR_PARAMS})

    def _check(self, df):
        """Checks every argument against the DataFrame before anything is written or launched."""
        model = self.getModel()
        if remote.lightning_package(model) is None:
            raise ValueError("LightningEstimator: model must be a LightningModule (lightning.pytorch or "
                             "pytorch_lightning >= 2.0), got %r; for a plain torch module use "
                             "tfring.spark.torch.TorchEstimator" % type(model).__name__)
        version = getattr(remote.lightning_package(model), "__version__", "2")
        if int(version.split(".")[0]) < 2:
            raise ValueError("LightningEstimator: Lightning %s; 2.0 or later is required" % version)
        job.check_data_args("LightningEstimator", self, df)
        shapes = self.getInputShapes()
        if shapes is not None and (not isinstance(shapes, (list, tuple)) or len(shapes) != len(self.getFeatureCols())):
            raise ValueError("LightningEstimator: input_shapes must hold one shape per feature column (%d)"
                             % len(self.getFeatureCols()))
        args = self.getTrainerArgs()
        if args is not None and not isinstance(args, dict):
            raise ValueError("LightningEstimator: trainer_args must be a dict, got %r" % (args,))
        for name in ("strategy", "devices", "num_nodes"):
            if name in (args or {}):
                raise ValueError("LightningEstimator: trainer_args[%r] is set by the estimator (one device per "
                                 "rank, the tfring strategy)" % name)
        if self.getNumGpus() not in (None, 0, 1):
            raise ValueError("LightningEstimator: num_gpus=%r: each rank drives one device (None, 0 or 1)"
                             % (self.getNumGpus(),))
        value = self.getLogEveryNSteps()
        if not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError("LightningEstimator: log_every_n_steps=%r must be a positive integer" % (value,))

    def _fit(self, df):
        self._check(df)
        num_proc, store, run_id = job.resolve_run(self, df, "lightning")
        units, val_units, train_rows, val_rows = job.stage_data("LightningEstimator", self, df, store, run_id,
                                                                num_proc)
        input_shapes = dry_run("LightningEstimator", self.getModel(), self.getFeatureCols(), self.getInputShapes(),
                               len(self.getLabelCols()), units)
        checkpoint_path = os.path.join(store.get_run_path(run_id), CHECKPOINT)
        resume_epochs = 0
        if os.path.exists(checkpoint_path):  # the epochs already run (the Trainer resumes after them)
            resume_epochs = int(torch.load(checkpoint_path, map_location="cpu", weights_only=False)["epoch"]) + 1
        use_gpu = self.getUseGpu() and self.getNumGpus() != 0
        spec = {
            "model": self.getModel(), "gradient_compression": self.getGradientCompression(),
            "callbacks": self.getCallbacks(), "feature_cols": self.getFeatureCols(),
            "label_cols": self.getLabelCols(), "sample_weight_col": self.getSampleWeightCol(),
            "input_shapes": input_shapes, "train_units": units, "val_units": val_units, "train_rows": train_rows,
            "val_rows": val_rows, "batch_size": self.getBatchSize(),
            "val_batch_size": self.getValBatchSize() or self.getBatchSize(), "epochs": self.getEpochs(),
            "resume_epochs": resume_epochs, "verbose": self.getVerbose(), "random_seed": self.getRandomSeed(),
            "shuffle": self.getShuffle(), "train_steps_per_epoch": self.getTrainStepsPerEpoch(),
            "validation_steps_per_epoch": self.getValidationStepsPerEpoch(), "use_gpu": use_gpu,
            "checkpoint_path": checkpoint_path, "logs_path": store.get_logs_path(run_id),
            "trainer_args": self.getTrainerArgs(), "logger": self.getLogger(),
            "log_every_n_steps": self.getLogEveryNSteps(), "terminate_on_nan": self.getTerminateOnNan(),
            "profiler": self.getProfiler(),
        }
        results = job.run_job(remote.train, spec, num_proc, self.getBackendEnv(), self.getVerbose(),
                              self.getBackend())
        trained = copy.deepcopy(self.getModel()).cpu()
        trained.load_state_dict(results[0]["state"])
        trained.eval()
        return LightningModel(history=results[0]["history"], model=trained, feature_columns=self.getFeatureCols(),
                              input_shapes=input_shapes, label_columns=self.getLabelCols(), run_id=run_id,
                              rank_digests=[r["digest"] for r in results], rank_rows=[r["rows"] for r in results],
                              rank_steps=[r["steps"] for r in results])

