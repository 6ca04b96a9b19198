"""Pytrees and Python objects across ranks: `broadcast_parameters` (model parameters, optax states),
`broadcast_object`, `allgather_object` (serialized with cloudpickle, as Horovod; read back with the standard
unpickler: they come from the job's own ranks)."""

import jax
import jax.numpy as jnp
import numpy as np

from tfring.common import object_collectives
from tfring.common import topology
from tfring.common.process_sets import global_process_set
from tfring.jax._gather import allgather, broadcast, grouped_broadcast


def broadcast_parameters(params, root_rank=0, name=None, process_set=global_process_set):
    """Every rank gets `root_rank`'s values of a pytree of arrays (parameters, an optax state), in one call.

    Args:
        params: a pytree whose leaves are arrays (or numbers); the same structure on every rank.
        root_rank: the global rank whose values are sent.
        name: the collective's name (default "broadcast_parameters").
        process_set: the `tfring.ProcessSet` (default: all ranks).

    Returns:
        The pytree with the root's values (same structure, shapes and dtypes).
    """
    leaves, tree = jax.tree_util.tree_flatten(params)
    arrays = [jnp.asarray(leaf) for leaf in leaves]
    out = grouped_broadcast(arrays, root_rank, name=name or "broadcast_parameters", process_set=process_set)
    return jax.tree_util.tree_unflatten(tree, out)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Sends a Python object from `root_rank` to every rank of the set.

    Args:
        obj: the object (only the root's is used).
        root_rank: the global rank whose object is sent.
        name: prefix of the collectives' names (default "broadcast_object").
        process_set: the `tfring.ProcessSet` (default: all ranks).

    Returns:
        `root_rank`'s object (on the root, `obj` itself).
    """
    return object_collectives.broadcast_object(
        obj, root_rank, topology.rank(),
        lambda a, n: np.asarray(broadcast(jnp.asarray(a), root_rank, name=n, process_set=process_set)),
        name or "broadcast_object")


def allgather_object(obj, name=None, process_set=global_process_set):
    """Gathers a Python object from every rank of the set.

    Args:
        obj: this rank's object.
        name: prefix of the collectives' names (default "allgather_object").
        process_set: the `tfring.ProcessSet` (default: all ranks).

    Returns:
        list: the objects, in rank order, on every rank.
    """
    return object_collectives.allgather_object(
        obj, lambda a, n: np.asarray(allgather(jnp.asarray(a), name=n, process_set=process_set)),
        name or "allgather_object")
