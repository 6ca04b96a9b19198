"""A Lightning 2.x Strategy over tfring.torch, for processes that tfring already launched (one device per rank).

Why a Strategy that syncs gradients around the optimizer step, rather than wrapping the optimizers in
`tfring.torch.DistributedOptimizer`: Lightning calls `optimizer.step(closure)` and the closure runs forward and
backward inside the step; a DistributedOptimizer synchronizes before it calls the wrapped step, so it would average
gradients that do not exist yet. Here the strategy wraps the closure instead: after Lightning's training step and
backward ran, every parameter gradient is averaged over the ranks (one grouped allreduce per optimizer step, named
identically on every rank), and only then does Lightning clip gradients, call `on_before_optimizer_step` and step.
It holds for automatic and manual optimization, gradient accumulation (no traffic on the batches that do not step),
several optimizers and closures called more than once (LBFGS). `reduce`, `broadcast`, `barrier` and `all_gather`
go through tfring too, so `self.log(..., sync_dist=True)`, EarlyStopping and ModelCheckpoint agree on every rank.

No torch.distributed process group is created; Lightning is told the rank and size through `rank_zero_only` and the
strategy's properties. Built by `make_strategy(pl)` for the package the user's module comes from (`lightning.pytorch`
or `pytorch_lightning`).
"""
import torch

__all__ = ["make_strategy"]


def _op_name(reduce_op):
    """'sum', 'mean', 'max', 'min' or 'product' for Lightning's reduce_op (a string, a ReduceOp or None)."""
    if reduce_op is None:
        return "mean"
    name = reduce_op if isinstance(reduce_op, str) else getattr(reduce_op, "name", None) or str(reduce_op)
    name = name.lower().rpartition(".")[2]
    return {"avg": "mean", "average": "mean", "prod": "product"}.get(name, name)


def sync_gradients(hvd, optimizer, name, compression=None):
    """Averages the gradients of an optimizer's parameters over the ranks, in place.

    A parameter without a gradient on this rank contributes zeros (every rank must send the same tensors).

    Args:
        hvd: tfring.torch.
        optimizer: a torch optimizer (its param_groups' parameters, in order).
        name: the collective's name, identical on every rank.
        compression: a `tfring.torch.Compression`, or None.
    """
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    if not params or hvd.size() == 1:
        return
    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    if compression is None:
        hvd.grouped_allreduce_(grads, op=hvd.Average, name=name)
        return
    for g, avg in zip(grads, hvd.grouped_allreduce(grads, op=hvd.Average, name=name, compression=compression)):
        g.copy_(avg)


def make_strategy(pl, hvd, device, compression=None):
    """A Strategy instance for this rank.

    Args:
        pl: the Lightning package (`lightning.pytorch` or `pytorch_lightning`).
        hvd: tfring.torch, initialized.
        device: this rank's torch.device.
        compression: the gradients' `tfring.torch.Compression`, or None.

    Returns:
        pl.strategies.ParallelStrategy: a `TfringStrategy`.
    """
    from lightning_utilities.core.rank_zero import rank_zero_only as utils_rank_zero_only

    class TfringStrategy(pl.strategies.ParallelStrategy):
        """Lightning's view of a tfring job: rank, size, collectives, and averaged gradients at each step."""

        strategy_name = "tfring"

        def __init__(self):
            super().__init__(accelerator=None, parallel_devices=[device])
            self._device = device

        @property
        def root_device(self):
            return self._device

        @property
        def global_rank(self):
            return hvd.rank()

        @property
        def local_rank(self):
            return hvd.local_rank()

        @property
        def node_rank(self):
            return hvd.cross_rank()

        @property
        def world_size(self):
            return hvd.size()

        @property
        def is_distributed(self):
            # Lightning asks a strategy it does not know for this; without it every self.log(..., sync_dist=True)
            # was silently not synced (each rank kept its own value).
            return hvd.size() > 1

        @property
        def distributed_sampler_kwargs(self):
            return {"num_replicas": hvd.size(), "rank": hvd.rank()}

        def setup_environment(self):
            pl.utilities.rank_zero.rank_zero_only.rank = utils_rank_zero_only.rank = hvd.rank()
            super().setup_environment()

        def model_to_device(self):
            self.model.to(self.root_device)

        def setup(self, trainer):
            super().setup(trainer)
            # Rank 0's weights everywhere; as Horovod's strategy did, the learning rates (and the schedulers' base
            # rates) are multiplied by the number of ranks.
            hvd.broadcast_parameters(self.lightning_module.state_dict(), root_rank=0)
            if trainer.state.fn == "fit":
                for optimizer in self.optimizers:
                    for group in optimizer.param_groups:
                        if isinstance(group.get("lr"), (int, float)):
                            group["lr"] = group["lr"] * hvd.size()
                for config in self.lr_scheduler_configs:
                    if hasattr(config.scheduler, "base_lrs"):
                        config.scheduler.base_lrs = [lr * hvd.size() for lr in config.scheduler.base_lrs]

        def optimizer_step(self, optimizer, closure, model=None, **kwargs):
            index = self.optimizers.index(optimizer) if optimizer in self.optimizers else 0
            inner = getattr(optimizer, "optimizer", optimizer)  # a LightningOptimizer's torch optimizer

            def synchronized():
                result = closure()
                sync_gradients(hvd, inner, "tfring.lightning.grads.%d" % index, compression)
                return result
            return super().optimizer_step(optimizer, synchronized, model, **kwargs)

        def reduce(self, tensor, group=None, reduce_op="mean"):
            if not isinstance(tensor, torch.Tensor):
                return tensor
            op = {"sum": hvd.Sum, "mean": hvd.Average, "max": hvd.Max, "min": hvd.Min,
                  "product": hvd.Product}[_op_name(reduce_op)]
            values = tensor.detach()
            out = hvd.allreduce(values.double() if values.dtype in (torch.bool, torch.long, torch.int) and
                                op is hvd.Average else values, op=op, name="tfring.lightning.reduce")
            return out.to(tensor.dtype) if out.dtype != tensor.dtype and op is not hvd.Average else out

        def all_gather(self, tensor, group=None, sync_grads=False):
            return hvd.allgather(tensor.unsqueeze(0), name="tfring.lightning.all_gather")

        def barrier(self, name=None):
            hvd.barrier()

        def broadcast(self, obj, src=0):
            return hvd.broadcast_object(obj, root_rank=src, name="tfring.lightning.broadcast")

        def teardown(self):
            if self.cluster_environment is None:
                self.cluster_environment = pl.plugins.environments.LightningEnvironment()
            super().teardown()

    return TfringStrategy()
