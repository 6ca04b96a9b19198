"""Whether TF gradients are reduced one by one as backprop produces them (overlap, Horovod's way) or in one grouped
collective after backprop. Overlap pays where the collective runs beside the compute: on a GPU (NCCL on its own
stream) or with a spare core per rank for the background thread and MPI's progress. With one core per rank the
reduction of early gradients competes with the rest of backprop for that core: measured on the dense-25M Keras
step (np=2, two cores, TF): per gradient 187-194 ms, grouped 155-158 ms, against 149 ms for the no-collective step
plus raw MPI's allreduce of the same bytes (docs/benchmarks.md). torch's DistributedOptimizer keeps Horovod's
per-parameter overlap whatever the cores: with glibc's default malloc it was the faster one at one core per rank
(113-116 ms vs 144-149 grouped), though with page faults kept out of the step grouped wins there too (100 vs 110 ms;
docs/benchmarks-frameworks.md), so only the TF binding asks for now.

TFRING_OVERLAP_GRADIENTS: 1 per gradient, 0 grouped, auto (the default) per gradient with a GPU build (NCCL: the
gradients of a GPU job reduce on their own stream) or where every host gives its ranks at least 2 logical CPUs
each, else grouped. The threshold of 2 is a judgement, not a measurement: only 1 CPU per rank was measured (this
2-core machine). Every rank must make the same choice (a per-gradient allreduce on one rank never matches a
grouped one on another), so auto reads only what every rank shares: the build, and the CPU count the core agreed on
at init (`topology.min_cores_per_rank`), never this rank's devices or this host's own count. In an elastic job auto
is Horovod's way: a graph traced (or an optimizer built) before a membership change keeps its choice while ranks
that join decide from the new membership's count, which may fall on the other side of the threshold (the same holds
for a graph traced before a shutdown and re-init with other ranks: set the variable there)."""
from tfring.common import knobs, launch_env, topology

ENV = "TFRING_OVERLAP_GRADIENTS"
MIN_CORES = 2  # per rank, job-wide, for overlap to pay on CPUs


def setting():
    """TFRING_OVERLAP_GRADIENTS as "1", "0" or "auto" (unset or empty: auto).

    Returns:
        str

    Raises:
        ValueError: TFRING_OVERLAP_GRADIENTS is not 1, 0 or auto.
    """
    raw, var = knobs.value(ENV)
    value = raw.strip().lower() or "auto"
    if value not in ("1", "0", "auto"):
        raise ValueError("%s=%r: expected 1 (one allreduce per gradient, overlapping backprop), 0 (one grouped "
                         "allreduce after backprop) or auto (the default)" % (var, raw))
    return value


def overlap_gradients():
    """Whether per-gradient collectives overlap backprop (the same answer on every rank of a job).

    Returns:
        bool

    Raises:
        ValueError: TFRING_OVERLAP_GRADIENTS is not 1, 0 or auto; or auto before tfring.init().
    """
    value = setting()
    if value != "auto":
        return value == "1"
    if launch_env.elastic_enabled():
        return True
    return topology.nccl_built() or topology.min_cores_per_rank() >= MIN_CORES
