"""The Spark ML Params of TorchEstimator and TorchModel, with Horovod's getter/setter names (getNumProc,
setInputShapes, getLossConstructors, getTrainMinibatchFn, ...), generated from one table per class."""
from pyspark.ml.param import TypeConverters

from tfring.spark.common.params import SHARED_ESTIMATOR_PARAMS, SHARED_MODEL_PARAMS

# The shared params (tfring.spark.common.params) and this framework's;
# name: (description, type converter or None, default).
ESTIMATOR_PARAMS = dict(SHARED_ESTIMATOR_PARAMS, **{
    "model": ("the torch.nn.Module to train", None, None),
    "optimizer": ("a torch.optim optimizer over the model's parameters; wrapped in tfring.torch.DistributedOptimizer",
                  None, None),
    "loss": ("loss function(s) loss(output, label): one, or a list with one per label column", None, None),
    "loss_constructors": ("functions returning the loss functions (instead of loss), called on every rank",
                          None, None),
    "loss_weights": ("optional weights of the label columns' losses (default: 1 / number of labels)", None, None),
    "metrics": ("optional metric groups: lists of metric(output, label) functions, averaged over ranks", None, None),
    "gradient_compression": ("tfring.torch.Compression for the DistributedOptimizer's allreduces", None, None),
    "feature_cols": ("feature columns, one per argument of the model's forward()", TypeConverters.toListString,
                     None),
    "input_shapes": ("optional shape per feature column, e.g. [[-1, 1, 8, 8]] (-1: the batch)", None, None),
    "callbacks": ("objects with on_epoch_end(epoch, logs) run on every rank after each epoch", None, []),
    "verbose": ("rank 0 prints each epoch's metrics when > 0", TypeConverters.toInt, 1),
    "random_seed": ("optional seed of the validation split, torch and the shuffles on the ranks", None, None),
    "run_id": ("id of the run in the store (default: pytorch_<time>_<random>)", None, None),
    "train_minibatch_fn": ("optional train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels, "
                           "sample_weights, backward_passes_per_step, batch_idx) -> (outputs, loss)", None, None),
    "backward_passes_per_step": ("backward passes accumulated locally before each allreduce", TypeConverters.toInt,
                                 1),
    "use_gpu": ("train on the GPU of each rank's local rank when torch sees one", TypeConverters.toBoolean, True),
})

MODEL_PARAMS = dict(SHARED_MODEL_PARAMS, **{
    "history": ("the training history: one dict per epoch ({'epoch', 'train', 'validation'}), averaged over ranks",
                None, None),
    "model": ("the trained torch.nn.Module (in eval mode)", None, None),
    "optimizer": ("the optimizer after training, over the returned model's parameters, at the unscaled learning "
                  "rate", None, None),
    "loss": ("the loss function(s)", None, None),
    "loss_constructors": ("the loss constructors", None, None),
    "input_shapes": ("the shape per feature column", None, None),
    "rank_digests": ("SHA-256 of every rank's final state_dict, in rank order", None, None),
})
