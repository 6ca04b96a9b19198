"""The Spark ML Params of TorchEstimator and TorchModel, with Horovod's getter/setter names (getNumProc,
setInputShapes, getLossConstructors, getTrainMinibatchFn, ...), generated from one table per class."""
from pyspark.ml.param import TypeConverters

# name: (description, type converter or None, default)
ESTIMATOR_PARAMS = {
    "num_proc": ("number of ranks (default: the SparkContext's defaultParallelism)", None, None),
    "model": ("the torch.nn.Module to train", None, None),
    "optimizer": ("a torch.optim optimizer over the model's parameters; wrapped in tfring.torch.DistributedOptimizer",
                  None, None),
    "loss": ("loss function(s) loss(output, label): one, or a list with one per label column", None, None),
    "loss_constructors": ("functions returning the loss functions (instead of loss), called on every rank",
                          None, None),
    "loss_weights": ("optional weights of the label columns' losses (default: 1 / number of labels)", None, None),
    "metrics": ("optional metric groups: lists of metric(output, label) functions, averaged over ranks", None, None),
    "sample_weight_col": ("optional column of per-row sample weights", None, None),
    "gradient_compression": ("tfring.torch.Compression for the DistributedOptimizer's allreduces", None, None),
    "feature_cols": ("feature columns, one per argument of the model's forward()", TypeConverters.toListString,
                     None),
    "input_shapes": ("optional shape per feature column, e.g. [[-1, 1, 8, 8]] (-1: the batch)", None, None),
    "label_cols": ("label columns, one per model output", TypeConverters.toListString, None),
    "validation": ("optional fraction (0 < v < 1) of rows held out at random, or a column name whose true/1 rows "
                   "are the validation set", None, None),
    "callbacks": ("objects with on_epoch_end(epoch, logs) run on every rank after each epoch", None, []),
    "batch_size": ("rows per batch, per rank", TypeConverters.toInt, 32),
    "val_batch_size": ("rows per validation batch (default: batch_size)", None, None),
    "epochs": ("number of epochs", TypeConverters.toInt, 1),
    "verbose": ("rank 0 prints each epoch's metrics when > 0", TypeConverters.toInt, 1),
    "random_seed": ("optional seed of the validation split, torch and the shuffles on the ranks", None, None),
    "shuffle": ("shuffle each rank's training rows every epoch", TypeConverters.toBoolean, True),
    "partitions_per_process": ("Parquet files written per rank", TypeConverters.toInt, 10),
    "run_id": ("id of the run in the store (default: pytorch_<time>_<random>)", None, None),
    "train_minibatch_fn": ("optional train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels, "
                           "sample_weights, backward_passes_per_step, batch_idx) -> (outputs, loss)", None, None),
    "train_steps_per_epoch": ("optional steps per epoch (default: training rows / (batch_size * num_proc))",
                              None, None),
    "validation_steps_per_epoch": ("optional validation steps per epoch (default: each rank's whole shard)",
                                   None, None),
    "store": ("a tfring.spark.common.Store or a path (default: a new temporary directory)", None, None),
    "backward_passes_per_step": ("backward passes accumulated locally before each allreduce", TypeConverters.toInt,
                                 1),
    "use_gpu": ("train on the GPU of each rank's local rank when torch sees one", TypeConverters.toBoolean, True),
    "backend_env": ("environment variables added for the ranks", None, {}),
}

MODEL_PARAMS = {
    "history": ("the training history: one dict per epoch ({'epoch', 'train', 'validation'}), averaged over ranks",
                None, None),
    "model": ("the trained torch.nn.Module (in eval mode)", None, None),
    "optimizer": ("the optimizer after training, over the returned model's parameters, at the unscaled learning "
                  "rate", None, None),
    "loss": ("the loss function(s)", None, None),
    "loss_constructors": ("the loss constructors", None, None),
    "feature_columns": ("the feature columns", TypeConverters.toListString, None),
    "input_shapes": ("the shape per feature column", None, None),
    "label_columns": ("the label columns", TypeConverters.toListString, None),
    "output_cols": ("the prediction columns (default: <label>__output)", TypeConverters.toListString, None),
    "run_id": ("the id of the run that trained the model", None, None),
    "rank_digests": ("SHA-256 of every rank's final state_dict, in rank order", None, None),
    "rank_rows": ("the training rows each rank read, in rank order", None, None),
    "rank_steps": ("the training steps each rank ran per epoch, in rank order", None, None),
}
