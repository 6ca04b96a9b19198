"""DistributedOptimizer for tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1): a public-API wrapper of the inner
tf_keras optimizer that allreduces gradients in apply_gradients() and delegates the update."""
import tf_keras

from tfring.compression import Compression
from tfring.functions import process_set_size
from tfring.keras._delegate import InnerOptimizerDelegation
from tfring.ops import Average, Sum
from tfring.tape import GradientReducer


@tf_keras.utils.register_keras_serializable(package="tfring")
class LegacyDistributedOptimizer(InnerOptimizerDelegation, tf_keras.optimizers.Optimizer):
    def __init__(self, optimizer, name=None, op=Average, compression=Compression.none, sparse_as_dense=False,
                 gradient_predivide_factor=1.0, groups=None, num_groups=0, process_set=None, device_dense="",
                 device_sparse="", scale_local_gradients=True, **kwargs):
        if not isinstance(optimizer, tf_keras.optimizers.Optimizer):
            raise TypeError("tfring.keras.DistributedOptimizer (tf_keras): optimizer must be a "
                            "tf_keras.optimizers.Optimizer, got %r" % (optimizer,))
        if op not in (Average, Sum):
            raise ValueError("tfring.keras.DistributedOptimizer: op=%r must be Average or Sum" % (op,))
        for unsupported in ("backward_passes_per_step", "average_aggregated_gradients"):
            if kwargs.get(unsupported) not in (None, 1, False):
                raise NotImplementedError("tfring.keras.DistributedOptimizer (tf_keras): %s=%r is only supported "
                                          "with Keras 3" % (unsupported, kwargs[unsupported]))
            kwargs.pop(unsupported, None)
        reducer = GradientReducer("tfring.keras.DistributedOptimizer (tf_keras)", op, compression, sparse_as_dense,
                                  gradient_predivide_factor, groups, num_groups, process_set, device_dense,
                                  device_sparse, scale_local_gradients)
        super().__init__(name=name or "Distributed%s" % type(optimizer).__name__, **kwargs)
        self.inner_optimizer = optimizer
        self._tfring_args = (op, compression, sparse_as_dense, gradient_predivide_factor)
        self._tfring_reducer = reducer

    def register_local_var(self, var):
        """var's gradient is not reduced over ranks (only scaled, see scale_local_gradients)."""
        self._tfring_reducer.register_local(var)

    def build(self, var_list):
        self.inner_optimizer.build(var_list)
        super().build(var_list)

    lr = InnerOptimizerDelegation.learning_rate  # tf_keras's older name for it

    @InnerOptimizerDelegation.iterations.setter
    def iterations(self, value):
        self.inner_optimizer.iterations = value

    @property
    def variables(self):
        return self.inner_optimizer.variables

    def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False, **kwargs):
        grads_and_vars = list(grads_and_vars)
        grads = [g for g, _ in grads_and_vars]
        variables = [v for _, v in grads_and_vars]
        if process_set_size(self._tfring_reducer.process_set) > 1:
            grads = self._tfring_reducer.reduce(grads, variables)
        return self.inner_optimizer.apply_gradients(zip(grads, variables), name=name,
                                                    skip_gradients_aggregation=skip_gradients_aggregation, **kwargs)

    def get_config(self):
        op, compression, sparse_as_dense, predivide = self._tfring_args
        groups = self._tfring_reducer.groups
        return {"name": self.name, "optimizer": tf_keras.optimizers.serialize(self.inner_optimizer), "op": op,
                "compression": {Compression.none: "none", Compression.fp16: "fp16", Compression.bf16: "bf16"}[
                    compression], "sparse_as_dense": sparse_as_dense, "gradient_predivide_factor": predivide,
                "groups": groups if isinstance(groups, int) else None,
                "scale_local_gradients": self._tfring_reducer.scale_local_gradients}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = tf_keras.optimizers.deserialize(config.pop("optimizer"), custom_objects=custom_objects)
        config["compression"] = {"none": Compression.none, "fp16": Compression.fp16, "bf16": Compression.bf16}[
            config["compression"]]
        return cls(inner, **config)
