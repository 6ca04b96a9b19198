"""DistributedOptimizer for Keras 3 on every backend (TensorFlow, JAX, torch): wraps an inner optimizer through
public API only, as keras.optimizers.LossScaleOptimizer does, and reduces the gradients in apply() before the inner
update. The backend's glue (tfring.keras._backend) gives the reducer and the k-th-pass control flow.

On JAX, apply() runs inside the trainer's jitted, stateless step (Optimizer.stateless_apply): the collectives are
compiled into the step, and every state change goes through variable assignment, which the stateless scope
records. With backward_passes_per_step > 1 the communication runs only on every k-th pass."""
import copy
import numbers

import keras
from keras import ops

from tfring.common import powersgd
from tfring.common.gradient_reducer import local_layer_variables
from tfring.common.optimizer_delegation import InnerOptimizerDelegation
from tfring.common.reduce_ops import Average, Sum
from tfring.keras import _loss_scale, _powersgd, _sharding
from tfring.keras._backend import glue

_glue = glue()
_COMPRESSIONS = {"none": _glue.Compression.none, "fp16": _glue.Compression.fp16, "bf16": _glue.Compression.bf16}
WHO = "tfring.keras.DistributedOptimizer"


def _compression_name(c):
    for name, cls in _COMPRESSIONS.items():
        if c is cls:
            return name
    raise ValueError("%s: compression=%r is not one of Compression.none/fp16/bf16" % (WHO, c))


class DistributedOptimizer(InnerOptimizerDelegation, keras.optimizers.Optimizer):
    """Averages (op=Average) or sums (op=Sum) gradients over the ranks of process_set (default: all), then
    applies the inner optimizer. `learning_rate` and `iterations` are the inner optimizer's; on a rank outside
    the set, or in a set of one rank, gradients are applied unreduced. Given a tf_keras (Keras 2) optimizer on the
    TensorFlow backend, the constructor returns the tf_keras wrapper instead (`tfring.tensorflow.tf_keras`). Under
    the mixed_float16 policy, or given a keras.optimizers.LossScaleOptimizer, it returns a LossScaleOptimizer
    around the DistributedOptimizer whose skip of a non-finite step is agreed by every rank of the set
    (`tfring.keras._loss_scale`). Keras on JAX and torch has no sparse gradients, so sparse_as_dense changes
    nothing there. groups given as variable lists, process_set and local variables are not part of get_config().

    Args:
        optimizer: the Keras optimizer that applies the reduced gradients (or its config dict).
        name: the wrapper's name (default "Distributed" + the inner class name).
        op: `Average` (default) or `Sum`.
        compression: `Compression.none`, `.fp16` or `.bf16` (or "none", "fp16", "bf16"), or
            `Compression.powersgd(rank, warmup_steps, min_size)`: a rank-r approximation with error feedback, its
            Q and error kept as optimizer variables (docs/compression.md); not combined with sharded,
            backward_passes_per_step > 1, groups or local variables.
        sparse_as_dense: turn TensorFlow's `tf.IndexedSlices` gradients into dense ones before reducing them.
        backward_passes_per_step: k > 1 accumulates k local gradients and communicates once every k steps.
        average_aggregated_gradients: with k > 1, apply the mean of the k gradients instead of their sum.
        gradient_predivide_factor: with Average, divide by this before the sum and by size/this after.
        groups: an int (that many contiguous groups) or lists of variables, one grouped allreduce each.
        device_dense, device_sparse: TensorFlow's devices for the collectives (GPU builds); elsewhere ignored.
        process_set: the `tfring.ProcessSet` to reduce over (default: all ranks).
        num_groups: deprecated spelling of an int `groups`.
        scale_local_gradients: divide local variables' gradients by the set's size (Horovod's default).
        sharded: False, or ZeRO stage 1 or 2 (True: 1): each rank of the set keeps and updates the inner
            optimizer's state for its 1/n of the weights (reduce-scatter the gradients, update the shard, all-gather
            the weights; docs/sharded-optimizer.md). Keras keeps no gradients between steps, so the stages do the
            same here. Element-wise inner optimizers only (SGD, Adam, AdamW, RMSprop, ...); global_clipnorm is
            computed across the shards; checkpoints hold the unsharded layout (they load at any size, sharded or
            not). Not combined with backward_passes_per_step > 1, groups, gradient_predivide_factor or local
            variables (a ValueError says so).
        **kwargs: keras.optimizers.Optimizer's arguments (learning_rate is the inner optimizer's).

    Raises:
        TypeError: `optimizer` is not a Keras optimizer.
        ValueError: op is not Average or Sum, backward_passes_per_step < 1, gradient_predivide_factor without
            Average, an unknown compression, malformed groups, or sharded with what it cannot combine with.
    """

    def __new__(cls, optimizer=None, *args, **kwargs):
        # One public name for both Keras versions: a tf_keras optimizer gets the tf_keras wrapper.
        wrapper = _glue.tf_keras_wrapper(optimizer)
        if wrapper is not None:
            return wrapper(optimizer, *args, **kwargs)
        if optimizer is not None and _loss_scale.wanted(optimizer):
            # Loss scaling goes outside, its skip decided by every rank (tfring/keras/_loss_scale.py).
            scaling = optimizer if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) else None
            distributed = super().__new__(cls)
            distributed.__init__(optimizer if scaling is None else scaling.inner_optimizer, *args, **kwargs)
            return _loss_scale.wrap(distributed, scaling)
        return super().__new__(cls)

    def __init__(self, optimizer, name=None, op=Average, compression=_glue.Compression.none, sparse_as_dense=False,
                 backward_passes_per_step=1, average_aggregated_gradients=False, gradient_predivide_factor=1.0,
                 groups=None, device_dense="", device_sparse="", process_set=None, num_groups=0,
                 scale_local_gradients=True, sharded=False, **kwargs):
        if isinstance(optimizer, dict):
            optimizer = keras.optimizers.deserialize(optimizer)
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise TypeError("%s: optimizer must be a keras.optimizers.Optimizer, got %r" % (WHO, optimizer))
        if op not in (Average, Sum):
            raise ValueError("%s: op=%r must be Average or Sum" % (WHO, op))
        if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, numbers.Integral) \
                or backward_passes_per_step < 1:
            raise ValueError("%s: backward_passes_per_step=%r must be an int >= 1" % (WHO, backward_passes_per_step))
        if isinstance(compression, str):
            if compression not in _COMPRESSIONS:
                raise ValueError("%s: compression=%r is not one of 'none', 'fp16', 'bf16'" % (WHO, compression))
            compression = _COMPRESSIONS[compression]
        low_rank = powersgd.settings(_powersgd.from_config(compression))
        if low_rank is None:
            _compression_name(compression)
        else:
            compression = low_rank
            passes = backward_passes_per_step != 1 and backward_passes_per_step
            for what, value in (("sharded", sharded), ("groups", groups or num_groups),
                                ("backward_passes_per_step", passes)):
                if value:
                    raise ValueError("%s: compression=%r does not combine with %s=%r"
                                     % (WHO, low_rank, what, value))
        stage = _sharded_stage(sharded, optimizer, backward_passes_per_step, groups or num_groups,
                               gradient_predivide_factor)
        wire = _glue.Compression.none if low_rank else compression  # PowerSGD runs its own rounds (_powersgd)
        reducer = _glue.GradientReducer(WHO, op=op, compression=wire, sparse_as_dense=sparse_as_dense,
                                        gradient_predivide_factor=gradient_predivide_factor, groups=groups,
                                        num_groups=num_groups, process_set=process_set, device_dense=device_dense,
                                        device_sparse=device_sparse, scale_local_gradients=scale_local_gradients)
        kwargs.pop("learning_rate", None)
        super().__init__(learning_rate=0.0, name=name or "Distributed%s" % type(optimizer).__name__, **kwargs)
        self.inner_optimizer = optimizer
        self.op = op
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.average_aggregated_gradients = average_aggregated_gradients
        self.gradient_predivide_factor = gradient_predivide_factor
        self.process_set = process_set
        self._reducer = reducer
        self.sharded, self._sharding = stage, None
        self._powersgd = None  # built with the variables when compression is PowerSGD

    def register_local_var(self, var):
        """Keeps var's gradient local: not reduced over ranks (only scaled, see scale_local_gradients).

        Args:
            var: a trainable variable of the model.

        Raises:
            ValueError: the optimizer is sharded (a flat shard mixes every variable).
        """
        if self.sharded:
            raise ValueError("%s: register_local_var: local variables and sharded=%d do not combine (a flat shard "
                             "mixes every variable)" % (WHO, self.sharded))
        if isinstance(self.compression, powersgd.PowerSGD):
            raise ValueError("%s: register_local_var: local variables and compression=%r do not combine"
                             % (WHO, self.compression))
        self._reducer.register_local(var)

    def build(self, var_list):
        if self.sharded:
            self._sharding = _sharding.Sharding(self, var_list, _glue.binding, self.op, self.process_set,
                                                self.compression, getattr(_glue, "write_flat", None),
                                                getattr(_glue, "shard_per_variable", False))
            self.inner_optimizer.build(self._sharding.params)
            if self.backward_passes_per_step > 1:  # stage 1 keeps each whole local gradient, stage 2 its shards
                self._pass_counter = self.add_variable((), dtype="int32", initializer="zeros", name="pass_counter")
                self._accumulators = [self.add_variable_from_reference(v, name="grad_accumulator") for v in var_list] \
                    if self.sharded == 1 else [self.add_variable((b["shard"],), dtype=b["dtype"], initializer="zeros",
                                                                 name="grad_shard_accumulator_%d" % k)
                                               for k, b in enumerate(self._sharding.layout.buckets)]
                self._sharding.accumulators = self._accumulators if self.sharded == 2 else []
            super().build(var_list)
            return
        self.inner_optimizer.build(var_list)
        if isinstance(self.compression, powersgd.PowerSGD):
            self._powersgd = _powersgd.PowerSGDState(self, self.compression, var_list, _glue.binding.grouped_allreduce,
                                                     self.process_set)
        if self.backward_passes_per_step > 1:
            self._pass_counter = self.add_variable((), dtype="int32", initializer="zeros", name="pass_counter")
            self._accumulators = [self.add_variable_from_reference(v, name="grad_accumulator") for v in var_list]
        super().build(var_list)

    @property
    def variables(self):
        return self._variables + self.inner_optimizer.variables

    def apply(self, grads, trainable_variables=None):
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        variables = list(trainable_variables) if trainable_variables is not None else self._trainable_variables
        if self.sharded and self.backward_passes_per_step > 1:
            self._accumulate_sharded([None if g is None else _glue.dense(g) for g in grads], variables)
        elif self.sharded:
            self._update_sharded(self._sharding.reduce([None if g is None else _glue.dense(g) for g in grads]),
                                 variables)
        elif self._powersgd is not None:
            pre, post = (1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor) \
                if self.op == Average else (1.0, 1.0)
            reduced = self._powersgd.reduce([None if g is None else _glue.dense(g) for g in grads],
                                            dict(op=self.op, prescale_factor=pre, postscale_factor=post))
            self.inner_optimizer.apply(reduced, trainable_variables)
        elif self.backward_passes_per_step == 1:
            self.inner_optimizer.apply(self._reducer.reduce(grads, variables), trainable_variables)
        else:
            self._accumulate(grads, variables, trainable_variables)

    def _accumulate_sharded(self, grads, variables):
        """backward_passes_per_step with sharding: stage 1 adds each pass's local gradients to whole accumulators
        and reduce-scatters their total on the k-th pass; stage 2 reduce-scatters every pass and adds the shards."""
        sharding = self._sharding
        if self.sharded == 2:
            for acc, shard in zip(self._accumulators, sharding.reduce(grads)):
                acc.assign(acc.value + shard)
        else:
            for acc, g in zip(self._accumulators, grads):
                if g is not None:
                    acc.assign(acc.value + g)
        buckets = sharding.layout.buckets
        _glue.on_kth_pass(self._count_pass(), self._accumulated,
                          (lambda shards: shards) if self.sharded == 2 else sharding.reduce,
                          lambda shards: self._update_sharded(shards, variables),
                          list(variables) + list(self.inner_optimizer.variables) + list(sharding.params),
                          self._accumulators,
                          skip=lambda: [ops.zeros((b["shard"],), dtype=b["dtype"]) for b in buckets])

    def _update_sharded(self, shards, variables):
        self._sharding.load_params(variables)
        inner, clip = self.inner_optimizer, self.inner_optimizer.global_clipnorm
        if clip:  # the norm of the whole gradient: every shard's sum of squares, summed over the set
            scale = self._sharding.clip_scale(shards, clip)
            shards = [s * ops.cast(scale, s.dtype) for s in shards]
        inner.global_clipnorm = None  # (clipped above; the inner optimizer would take its shard for the whole)
        try:
            inner.apply(shards, self._sharding.params)
        finally:
            inner.global_clipnorm = clip
        self._sharding.store_params(variables)

    def save_own_variables(self, store):
        """The unsharded layout: each state shard all-gathered and cut per variable (every rank must call it)."""
        if not self.sharded:
            return super().save_own_variables(store)
        for i, value in enumerate(self.sharded_state()):
            store[str(i)] = value

    def load_own_variables(self, store):
        """Takes an unsharded layout (saved sharded at any size, or unsharded) and keeps this rank's shard."""
        if not self.sharded:
            return super().load_own_variables(store)
        self.load_sharded_state([store[str(i)] for i in range(len(store.keys()))])

    # -- elastic jobs (tfring.keras.elastic.KerasState) --

    def sharded_state(self):
        """The sharded optimizer's values in the unsharded layout (a collective of the set, as saving is).

        Returns:
            list: numpy arrays, the layout `model.save` writes (loads at any size, sharded or not).
        """
        return self._sharding.saved_values(self._variables, self.inner_optimizer)

    def load_sharded_state(self, values):
        """Keeps this rank's shard of `values`; no collective.

        Args:
            values: `sharded_state()`'s layout, saved at any size (or by an unsharded optimizer).
        """
        self._sharding.load_values(self._variables, self.inner_optimizer, list(values), WHO)

    def plain_state(self):
        """The optimizer's values not cut into shards (iterations, the learning rate, the wrapper's own), in an order
        every rank shares at any size.

        Returns:
            list: numpy arrays.
        """
        return [keras.ops.convert_to_numpy(v.value)
                for v in self._sharding.plain_variables(self._variables, self.inner_optimizer)]

    def load_plain_state(self, values):
        """Assigns `plain_state()`'s values (another rank's); no collective.

        Args:
            values: `plain_state()`'s list.

        Raises:
            ValueError: not as many values as this optimizer's plain variables.
        """
        variables = self._sharding.plain_variables(self._variables, self.inner_optimizer)
        if len(variables) != len(values):
            raise ValueError("%s: load_plain_state: %d values for %d plain variables" % (WHO, len(values),
                                                                                          len(variables)))
        for v, value in zip(variables, values):
            v.assign(value)

    def reshard(self):
        """After an elastic reset: cuts the state again for the set's current size when it changed (new shard
        variables, the inner optimizer's per-shard state built on them, all zero until `load_sharded_state`). The
        plain values (iterations, learning rate) and stage 1's whole accumulators stay.

        Returns:
            bool: whether the size had changed (and the state was cut again).
        """
        old = self._sharding
        if old is None or (old.rank, old.size) == _sharding.current_place(self.process_set):
            return False
        inner = self.inner_optimizer
        while isinstance(inner, keras.optimizers.LossScaleOptimizer):  # its own variables are plain: they stay
            inner = inner.inner_optimizer
        # Everything the inner optimizer's build() made goes (its per-shard slots, and plain ones such as Nadam's
        # u_product): build() makes them again; what its constructor made (iterations, learning rate) stays.
        kept = len(type(inner).from_config(inner.get_config()).variables)
        for v in list(inner.variables)[kept:]:
            inner._untrack_variable(v)
        for v in list(old.params) + list(old.accumulators):
            self._untrack_variable(v)
        inner.built = False  # Keras optimizers build once; their slot lists are made again by build()
        with keras.name_scope(self.name, caller=self):
            self._sharding = _sharding.Sharding(self, self._trainable_variables, _glue.binding, self.op,
                                                self.process_set, self.compression, getattr(_glue, "write_flat", None),
                                                getattr(_glue, "shard_per_variable", False))
            inner.build(self._sharding.params)
            if old.accumulators:  # stage 2 over backward passes: shard-sized accumulators
                self._accumulators = [self.add_variable((b["shard"],), dtype=b["dtype"], initializer="zeros",
                                                        name="grad_shard_accumulator_%d" % k)
                                      for k, b in enumerate(self._sharding.layout.buckets)]
                self._sharding.accumulators = self._accumulators
        return True

    def _count_pass(self):
        """Counts this backward pass; whether it is the k-th (the same on every rank: each counts its own)."""
        self._pass_counter.assign((self._pass_counter.value + 1) % self.backward_passes_per_step)
        return ops.equal(self._pass_counter.value, 0)

    def _accumulated(self):
        """What the k-th pass applies: the accumulators' mean (average_aggregated_gradients) or sum."""
        k = self.backward_passes_per_step
        return [a.value / k if self.average_aggregated_gradients else a.value for a in self._accumulators]

    def _accumulate(self, grads, variables, trainable_variables):
        for acc, g in zip(self._accumulators, grads):
            if g is not None:
                acc.assign(acc.value + _glue.dense(g))
        _glue.on_kth_pass(self._count_pass(), self._accumulated, lambda grads: self._reducer.reduce(grads, variables),
                          lambda grads: self.inner_optimizer.apply(grads, trainable_variables),
                          list(variables) + list(self.inner_optimizer.variables), self._accumulators)

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    def get_config(self):
        return {
            "name": self.name,
            "optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
            "op": self.op,
            "compression": _powersgd.to_config(self.compression) if isinstance(self.compression, powersgd.PowerSGD)
            else _compression_name(self.compression),
            "sparse_as_dense": self.sparse_as_dense,
            "backward_passes_per_step": self.backward_passes_per_step,
            "average_aggregated_gradients": self.average_aggregated_gradients,
            "gradient_predivide_factor": self.gradient_predivide_factor,
            "groups": self._reducer.groups if isinstance(self._reducer.groups, int) else None,
            "scale_local_gradients": self._reducer.scale_local_gradients,
            "sharded": self.sharded,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = copy.deepcopy(config)
        inner = keras.saving.deserialize_keras_object(config.pop("optimizer"), custom_objects=custom_objects)
        restored = super(DistributedOptimizer, cls).__new__(cls)  # (its loss scaling is restored around it)
        restored.__init__(inner, **config)
        return restored


def _sharded_stage(sharded, optimizer, backward_passes_per_step, groups, gradient_predivide_factor):
    """The ZeRO stage of `sharded` (0: off), or a ValueError naming what does not combine with it."""
    if sharded is True:
        sharded = 1
    if sharded is False or sharded is None or sharded == 0:
        return 0
    if isinstance(sharded, bool) or sharded not in _sharding.STAGES:
        raise ValueError("%s: sharded=%r must be False, True, 1 or 2 (the ZeRO stage)" % (WHO, sharded))
    for what, value, neutral in (("groups", groups, 0), ("gradient_predivide_factor", gradient_predivide_factor, 1.0)):
        if (value or 0) != (neutral or 0):
            raise ValueError("%s: %s=%r does not combine with sharded=%r (not built)" % (WHO, what, value, sharded))
    _sharding.check_inner(WHO, optimizer)
    return int(sharded)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=_glue.Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average, groups=None, process_set=None,
                                local_layers=None, scale_local_gradients=True, **kwargs):
    """`DistributedOptimizer` that keeps the gradients of `local_layers`' trainable variables local.

    Args:
        optimizer, name, device_dense, device_sparse, compression: as for `DistributedOptimizer`.
        sparse_as_dense, gradient_predivide_factor, op, groups, process_set: the same.
        local_layers: a built Keras layer, or a list of them, whose variables stay local.
        scale_local_gradients: divide the local gradients by the set's size (Horovod's default).
        **kwargs: other `DistributedOptimizer` arguments (e.g. backward_passes_per_step).

    Returns:
        The DistributedOptimizer.

    Raises:
        ValueError: a local layer is not a built Keras layer, or other arguments are malformed.
    """
    local_vars = local_layer_variables("tfring.keras.PartialDistributedOptimizer", local_layers,
                                       _glue.layer_types())
    opt = DistributedOptimizer(optimizer, name=name, op=op, compression=compression, sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, groups=groups,
                               device_dense=device_dense, device_sparse=device_sparse, process_set=process_set,
                               scale_local_gradients=scale_local_gradients, **kwargs)
    for v in local_vars:
        opt.register_local_var(v)
    return opt


keras.saving.register_keras_serializable(package="tfring")(DistributedOptimizer)
