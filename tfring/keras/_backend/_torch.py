"""tfring.keras on the torch backend: tfring.torch's collectives, eagerly in the torch trainer's step."""
import functools

import numpy as np
import torch
from keras import ops

import tfring.torch as binding  # noqa: F401 (the backend's binding, read by tfring.keras)
from tfring.common.names import tensor_names
from tfring.keras import _reducer
from tfring.keras._backend._eager_defaults import (EXPORTS_WHOLE_BINDING, dense, layer_types,  # noqa: F401
                                                   tf_keras_wrapper, var_key)
from tfring.torch.compression import Compression  # noqa: F401


def _grouped_allreduce(tensors, compression=Compression.none, **kwargs):
    """The gradients the torch trainer just computed are reduced in place (no output tensors to allocate and
    fill: measured 85 -> ~39 ms of MPI time per step for the dense-25M gradients); compressed ones out of place."""
    if compression is Compression.none:
        return binding.grouped_allreduce_([t if t.is_contiguous() else t.contiguous() for t in tensors], **kwargs)
    return binding.grouped_allreduce(tensors, compression=compression, **kwargs)


def _core_names(name, n):
    """tfring.torch negotiates a grouped allreduce named `name` under Horovod's prefix, by the core's rule."""
    return tensor_names("grouped_allreduce." + name, n)


GradientReducer = functools.partial(_reducer.GradientReducer, grouped_allreduce=_grouped_allreduce,
                                    core_names=_core_names)


def on_kth_pass(update, total, reduce, apply, kept, accumulators, skip=None):
    """backward_passes_per_step, eagerly: plain control flow."""
    if bool(update):
        apply(reduce(total()))
        for a in accumulators:
            a.assign(ops.zeros_like(a.value))


def write_flat(variable, lo, hi, value):
    """Writes `value` into elements [lo, hi) of the variable's flat view, in place (the sharded optimizer's
    gathered pieces: no whole-variable temporary)."""
    with torch.no_grad():
        variable.value.view(-1)[lo:hi].copy_(value)


def to_native(value):
    """A numpy, Keras or torch value as a torch tensor (on the CPU unless it is one already)."""
    return value if torch.is_tensor(value) else torch.as_tensor(np.asarray(value))


def allreduce_numpy(values, op, name, process_set):
    """Reduces a numpy array over the ranks; returns numpy."""
    return binding.allreduce(torch.as_tensor(values), op=op, name=name, process_set=process_set).numpy()


def broadcast_variables(variables, root_rank, process_set):
    """Assigns root_rank's values to the Keras variables (in place, on their torch tensors)."""
    binding.broadcast_parameters([v.value for v in variables], root_rank=root_rank, process_set=process_set)


def before_fit(model):
    """Nothing to prepare (tfring's collectives compile into the step on this backend, or it is eager)."""


def sync_model_state(model):
    """The torch trainer keeps the state in the variables: nothing to do."""


def as_numpy(value):
    """A value as numpy."""
    return value.detach().cpu().numpy() if torch.is_tensor(value) else np.asarray(value)
