"""Dynamic loss scaling (mixed_float16) around the Keras DistributedOptimizer, agreed across the ranks.

Keras' LossScaleOptimizer skips a step whose gradients hold an inf or NaN, deciding from the gradients it is given:
wrapped around the DistributedOptimizer (what `model.compile` does under the mixed_float16 policy), those are each
rank's own, unreduced ones, so a rank whose batch overflowed would skip the step, and its reduction, while the others
reduce: the job stalls, and the ranks' loss scales part. Here the decision is the set's: a step is skipped on every
rank if any rank's gradients are not finite (one allreduce of a flag), and the loss scale stays the same everywhere.
"""
import keras
from keras import ops

from tfring.common.reduce_ops import Min
from tfring.keras._backend import glue


@keras.saving.register_keras_serializable(package="tfring")
class DistributedLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """keras.optimizers.LossScaleOptimizer whose finiteness check is agreed over the inner DistributedOptimizer's
    process set. `tfring.keras.DistributedOptimizer` returns one under the mixed_float16 policy (so `compile` does
    not wrap it again), or when given a LossScaleOptimizer.

    Args:
        inner_optimizer: the tfring.keras.DistributedOptimizer.
        initial_scale, dynamic_growth_steps, **kwargs: as for keras.optimizers.LossScaleOptimizer.
    """

    def register_local_var(self, var):
        """The DistributedOptimizer's register_local_var (PartialDistributedOptimizer's local layers)."""
        self.inner_optimizer.register_local_var(var)

    def check_finite(self, grads):
        finite = ops.cast(super().check_finite(grads), "float32")
        process_set = getattr(self.inner_optimizer, "process_set", None)
        kwargs = {} if process_set is None else {"process_set": process_set}
        agreed = glue().binding.allreduce(finite, name="loss_scale.finite", op=Min, **kwargs)
        return ops.equal(agreed, 1.0)


def wrap(distributed, scaling=None):
    """`distributed` (a DistributedOptimizer) inside a DistributedLossScaleOptimizer with the settings of the
    LossScaleOptimizer `scaling` (or Keras' defaults)."""
    settings = {} if scaling is None else {"initial_scale": scaling.initial_scale,
                                           "dynamic_growth_steps": scaling.dynamic_growth_steps}
    return DistributedLossScaleOptimizer(distributed, name="loss_scale_optimizer", **settings)


def wanted(optimizer):
    """Whether a new DistributedOptimizer of `optimizer` needs the agreed loss scaling: the optimizer is a
    LossScaleOptimizer, or the global policy is mixed_float16 (under which `compile` would wrap it unagreed)."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return True
    return keras.mixed_precision.dtype_policy().name == "mixed_float16"
