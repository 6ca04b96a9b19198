"""`DistributedOptimizer(op=Adasum)`: the Adasum delta optimizer (Horovod's, on CPU and in host memory).

Each rank takes the wrapped optimizer's step on its own gradients; the change of every parameter (the delta) is
then combined over the ranks with the Adasum operator and applied to the parameters as they were before the step.
Adasum adapts to the deltas' agreement (orthogonal deltas add up, equal ones count once), which is why Horovod
reduces deltas rather than gradients: the wrapped optimizer's own rule (momentum, Adam) shapes each rank's delta.
"""
from contextlib import contextmanager

import torch

from tfring.common.reduce_ops import check_adasum
from tfring.torch.mpi_ops import Adasum, allreduce_async_, synchronize


class DistributedAdasumOptimizer:
    """Mixed in front of the wrapped optimizer's class by `DistributedOptimizer(op=Adasum)`."""

    def _tfring_adasum_init(self, parameter_names, compression, backward_passes_per_step, process_set):
        self._parameter_names = parameter_names
        self._compression = compression
        # Gradients accumulate in .grad over the backward passes; the deltas are reduced once, in step().
        self.backward_passes_per_step = backward_passes_per_step
        self.op = Adasum
        self.process_set = process_set
        if process_set.included():
            check_adasum("DistributedOptimizer", process_set.size())

    def set_backward_passes_per_step(self, passes):
        """Accepted for Horovod's API: gradients of every backward pass accumulate until `step()`.

        Args:
            passes: int > 0.
        """
        self.backward_passes_per_step = passes

    def synchronize(self):
        """Nothing to wait for: the deltas are reduced inside `step()` (as Horovod's Adasum optimizer)."""

    @contextmanager
    def skip_synchronize(self):
        """Refused, as in Horovod: the Adasum optimizer has no separate gradient synchronization to skip.

        Raises:
            AssertionError: always.
        """
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # pragma: no cover - makes this a generator for contextmanager

    def step(self, closure=None):
        """Takes the wrapped optimizer's step locally, then replaces each parameter's change by the Adasum
        combination of every rank's change.

        Every parameter that requires grad takes part on every rank (one without a gradient contributes a zero
        delta), so the ranks submit the same collectives whatever their data.

        Args:
            closure: passed to the wrapped optimizer's step.

        Returns:
            What the wrapped optimizer's step returns.
        """
        if not self.process_set.included():
            return super().step(closure)
        params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        with torch.no_grad():
            starts = [p.detach().clone() for p in params]
        loss = super().step(closure)
        with torch.no_grad():
            pending = []
            for p, start in zip(params, starts):
                delta, ctx = self._compression.compress(p.detach() - start)
                name = "adasum." + self._parameter_names[p]
                pending.append((p, start, ctx, allreduce_async_(delta, name=name, op=Adasum,
                                                                process_set=self.process_set)))
            for p, start, ctx, handle in pending:
                delta = self._compression.decompress(synchronize(handle), ctx)
                p.copy_(start.add_(delta.to(start.dtype)))
        return loss
