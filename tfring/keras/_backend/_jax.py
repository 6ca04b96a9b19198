"""tfring.keras on the JAX backend: tfring.jax's collectives, which also run inside the trainer's jitted,
stateless train step (compiled into it as XLA custom calls)."""
import functools

import jax.numpy as jnp
import numpy as np
from keras import ops

import tfring.jax as binding  # noqa: F401 (the backend's binding, read by tfring.keras)
from tfring.jax.compression import Compression  # noqa: F401
from tfring.keras import _reducer
from tfring.keras._backend._eager_defaults import (EXPORTS_WHOLE_BINDING, dense, layer_types,  # noqa: F401
                                                   tf_keras_wrapper, var_key)

# Sharded optimizer: one block per variable and grouped collectives (tfring/keras/_sharding.py, per_variable).
shard_per_variable = True
GradientReducer = functools.partial(_reducer.GradientReducer, grouped_allreduce=binding.grouped_allreduce)


def on_kth_pass(update, total, reduce, apply, kept, accumulators, skip=None):
    """backward_passes_per_step inside the jitted, stateless step: the reduction runs under lax.cond (only the
    k-th pass communicates); the inner update is computed on every pass and kept only on the k-th (a select: a
    stateless scope's assignments cannot happen inside a branch). `skip`: the other branch's value where the
    reduction changes the shapes (a sharded reduce-scatter), else the total itself."""
    reduced = ops.cond(update, lambda: reduce(total()), skip or total)
    before = [v.value for v in kept]
    apply(reduced)
    for v, old in zip(kept, before):
        v.assign(ops.where(update, v.value, old))
    for a in accumulators:
        a.assign(ops.where(update, ops.zeros_like(a.value), a.value))


def to_native(value):
    """A numpy, Keras or JAX value as a JAX array."""
    return jnp.asarray(value)


def allreduce_numpy(values, op, name, process_set):
    """Reduces a numpy array over the ranks; returns numpy."""
    return np.asarray(binding.allreduce(jnp.asarray(values), op=op, name=name, process_set=process_set))


def broadcast_variables(variables, root_rank, process_set):
    """Assigns root_rank's values to the Keras variables."""
    variables = list(variables)
    values = binding.broadcast_parameters([v.value for v in variables], root_rank=root_rank,
                                          process_set=process_set)
    for v, value in zip(variables, values):
        v.assign(value)


def before_fit(model):
    """Nothing to prepare (tfring's collectives compile into the step on this backend, or it is eager)."""


def sync_model_state(model):
    """During fit the JAX trainer holds the state outside the variables: write it back, so that what a callback
    reads or assigns is the current state (the next step reads the variables again)."""
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()


def as_numpy(value):
    """A value as numpy."""
    return np.asarray(value)
