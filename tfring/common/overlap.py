"""Whether TF gradients are reduced one by one as backprop produces them (overlap, Horovod's way: the default) or
in one grouped collective after backprop (TFRING_OVERLAP_GRADIENTS=0). Overlap pays where the collective runs
beside the compute: on a GPU (NCCL on its own stream) or with a spare core per rank for the background thread and
MPI's progress. With one core per rank the reduction of early gradients competes with the rest of backprop for
that core: measured on the dense-25M Keras step (np=2, two cores, TF): per gradient 187-194 ms, grouped 155-158 ms,
against 149 ms for the no-collective step plus raw MPI's allreduce of the same bytes (docs/benchmarks.md).

The choice is the user's, not guessed per host: every rank must make the same one (a per-gradient allreduce on one
rank never matches a grouped one on another), and hosts may differ in cores, ranks and devices."""
import os

ENV = "TFRING_OVERLAP_GRADIENTS"


def overlap_gradients():
    """Whether per-gradient collectives overlap backprop (TFRING_OVERLAP_GRADIENTS: 1, the default, or 0).

    Returns:
        bool

    Raises:
        ValueError: TFRING_OVERLAP_GRADIENTS is not 1 or 0.
    """
    value = os.environ.get(ENV, "1").strip()
    if value not in ("1", "0"):
        raise ValueError("%s=%r: expected 1 (one allreduce per gradient, overlapping backprop; the default) or 0 "
                         "(one grouped allreduce after backprop)" % (ENV, os.environ[ENV]))
    return value == "1"
