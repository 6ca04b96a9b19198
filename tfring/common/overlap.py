"""Whether to reduce gradients one by one as backprop produces them (overlap, Horovod's way) or in one grouped
collective after backprop. Overlap pays where the collective runs beside the compute: on a GPU (NCCL on its own
stream) or with a spare core per rank for the background thread and MPI's progress. With one core per rank, the
reduction of early gradients competes with the rest of backprop for that core: measured on the dense-25M Keras
step (np=2, two cores, TF): per gradient 187-194 ms, one grouped allreduce 155-158 ms, against 149 ms for the
no-collective step plus raw MPI's allreduce of the same bytes (docs/benchmarks.md).

TFRING_OVERLAP_GRADIENTS: "1" per gradient, "0" grouped, unset or "auto" decides as above."""
import os

ENV = "TFRING_OVERLAP_GRADIENTS"


def cores_per_rank():
    """The cores this process may run on, divided by the ranks on its host (at least 1 rank)."""
    from tfring.common import topology
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        ranks = topology.local_size()
    except Exception:  # noqa: BLE001 - not initialized yet: the collective itself will say so
        ranks = 1
    return cores / max(1, ranks)


def overlap_pays(on_gpu):
    """Whether per-gradient collectives should overlap backprop.

    Args:
        on_gpu: callable: whether the gradients live on a GPU (asked only when the setting is auto).

    Returns:
        bool

    Raises:
        ValueError: TFRING_OVERLAP_GRADIENTS is not 1, 0 or auto.
    """
    value = os.environ.get(ENV, "auto").strip().lower()
    if value not in ("1", "0", "auto", ""):
        raise ValueError("%s=%r: expected 1 (per gradient), 0 (one grouped collective) or auto" % (
            ENV, os.environ[ENV]))
    if value in ("1", "0"):
        return value == "1"
    return cores_per_rank() >= 2 or bool(on_gpu())
