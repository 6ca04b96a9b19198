"""PowerSGD (tfring/common/powersgd.py) for the Keras DistributedOptimizer on every backend: Q and the error are
optimizer variables (so JAX's stateless, jitted step carries them, and checkpoints hold them), the linear algebra
is keras.ops, and the warm-up is an ops.cond whose branches return the new state instead of assigning it (a
stateless scope cannot assign inside a branch)."""
from keras import ops

from tfring.common import powersgd
from tfring.common.gradient_groups import communicates


class KerasLinearAlgebra(powersgd.LinearAlgebra):
    """keras.ops' matrix products and QR (the active backend's)."""

    matmul = staticmethod(ops.matmul)
    matmul_tn = staticmethod(lambda a, b: ops.matmul(ops.transpose(a), b))
    matmul_nt = staticmethod(lambda a, b: ops.matmul(a, ops.transpose(b)))
    orthonormal = staticmethod(lambda p: ops.qr(p, mode="reduced")[0])


class PowerSGDState:
    """The optimizer's PowerSGD variables and step.

    Args:
        optimizer: the DistributedOptimizer (it owns the variables).
        config: the `PowerSGD` settings.
        var_list: the trainable variables (the gradients' order).
        grouped_allreduce: the backend binding's grouped_allreduce.
        process_set: the set to reduce over (None: all ranks).
    """

    def __init__(self, optimizer, config, var_list, grouped_allreduce, process_set):
        self.config, self._grouped_allreduce, self._process_set = config, grouped_allreduce, process_set
        self.shapes = {}  # index -> (n, m) of each compressed variable
        self.qs, self.errors = {}, {}
        for i, v in enumerate(var_list):
            nm = config.matrix_shape(v.shape)
            if nm is None:
                continue
            self.shapes[i] = nm
            # The first Q as the initializer, not an assign after: TensorFlow may build inside the traced step,
            # where an assign would run again on every step.
            first = config.initial_q(nm[1], i)
            self.qs[i] = optimizer.add_variable((nm[1], config.rank), dtype=v.dtype, name="powersgd_q",
                                                initializer=lambda shape, dtype, first=first: ops.cast(first, dtype))
            self.errors[i] = optimizer.add_variable((nm[0], nm[1]), dtype=v.dtype, initializer="zeros",
                                                    name="powersgd_error")
        self.steps = optimizer.add_variable((), dtype="int32", initializer="zeros", name="powersgd_steps") \
            if config.warmup_steps else None

    def reduce(self, grads, kwargs):
        """One step's reduced gradients.

        Args:
            grads: dense gradients in the variables' order (None stays None).
            kwargs: the reducer's op and scale factors.

        Returns:
            list: the reduced gradients.
        """
        if not communicates(self._process_set):
            return list(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        compressed = [i for i in present if i in self.shapes]
        plain = [i for i in present if i not in self.shapes]
        rounds = iter(("powersgd.P", "powersgd.Q"))

        def allreduce(tensors):
            return list(self._grouped_allreduce(tensors, name=next(rounds), process_set=self._process_set,
                                                **kwargs)) if tensors else []

        def compress():
            return powersgd.compress_step(grads, self.shapes, compressed, plain, [self.qs[i].value for i in compressed],
                                          [self.errors[i].value for i in compressed], allreduce, KerasLinearAlgebra,
                                          ops.reshape)

        def warm_up():
            reduced = list(self._grouped_allreduce([grads[i] for i in compressed + plain], name="powersgd.warmup",
                                                   process_set=self._process_set, **kwargs))
            return reduced, [self.qs[i].value for i in compressed], [self.errors[i].value for i in compressed]

        if self.steps is None:
            reduced, qs, errors = compress()
        else:
            self.steps.assign(self.steps.value + 1)
            reduced, qs, errors = ops.cond(self.steps.value <= self.config.warmup_steps, warm_up, compress)
        for i, q, e in zip(compressed, qs, errors):
            self.qs[i].assign(q)
            self.errors[i].assign(e)
        return powersgd.placed(grads, compressed + plain, reduced)


def from_config(value):
    """`compression=` as get_config() wrote it: a PowerSGD config dict becomes the settings again."""
    if isinstance(value, dict) and value.get("class_name") == "PowerSGD":
        return powersgd.PowerSGD(**value["config"])
    return value


def to_config(config):
    """The settings as get_config() writes them."""
    return {"class_name": "PowerSGD", "config": config.get_config()}

