"""`SyncBatchNorm` (Horovod's `horovod.torch.SyncBatchNorm`): batch normalization whose training-mode statistics
are those of the global batch, the concatenation of every rank's batch.

Written with plain tensor operations, so it runs on CPU as well as on GPU (Horovod's needs CUDA inputs)."""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from tfring.torch.mpi_ops import Sum, allgather, allreduce, global_process_set, size


def _set_size(process_set):
    n = process_set.size() if process_set not in (None, global_process_set) else None
    return size() if n is None else n


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over the global batch, for inputs (N, C), (N, C, L), (N, C, H, W), (N, C, D, H, W), ...

    In training mode the mean and variance of each channel are computed over every rank's batch (ranks may hold
    batches of different sizes), and so are the gradients that flow through them; the weight and bias gradients
    stay local, as those of any other parameter (`DistributedOptimizer` averages them). In eval mode the running
    statistics are used, as `torch.nn.BatchNorm*d` does.

    Args:
        num_features: the number of channels C of inputs shaped (N, C, ...).
        eps: added to the variance for numerical stability.
        momentum: the running statistics' update factor, or None for a cumulative moving average.
        affine: learnable weight and bias per channel.
        track_running_stats: keep running mean and variance (else batch statistics are used in eval mode too).
        process_set: the `ProcessSet` whose ranks share statistics (default: all ranks); only its ranks call it.
        device, dtype: of the parameters and buffers.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def forward(self, input):
        """Normalizes `input` with global batch statistics (training) or the running statistics (eval).

        Args:
            input: a tensor (N, C, ...).

        Returns:
            The normalized tensor, of the input's shape and dtype.

        Raises:
            ValueError: the input has fewer than 2 dimensions, or (training) the global batch has at most one
                value per channel.
        """
        self._check_input_dim(input)
        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or _set_size(self.process_set) == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                use_batch_stats, factor, self.eps)
        # Running statistics are updated only in training (torch: eval without them uses batch statistics).
        running = (self.running_mean, self.running_var) if self.training else (None, None)
        return _SyncBatchNorm.apply(input, self.weight, self.bias, running[0], running[1], self.eps, factor,
                                    self.process_set)


def _acc_dtype(dtype):
    # Half precision inputs compute their statistics in float32, as torch's batch norm kernels do.
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _channel_view(t, ndim):
    return t.view([1, -1] + [1] * (ndim - 2))


class _SyncBatchNorm(torch.autograd.Function):

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_set):
        channels = input.size(1)
        dims = [0] + list(range(2, input.dim()))
        x = input.to(_acc_dtype(input.dtype))
        count = input.numel() // channels if channels else 0
        if count > 0:
            mean, var = x.mean(dims), x.var(dims, unbiased=False)
        else:
            mean, var = x.new_zeros(channels), x.new_zeros(channels)
        # One allgather of (count, mean, var) per rank, in float64: counts stay exact and the combination is
        # Chan's parallel variance (no sum of squares losing precision).
        local = torch.cat([torch.tensor([float(count)], dtype=torch.float64, device=x.device),
                           mean.double(), var.double()]).unsqueeze(0)
        stats = allgather(local, name="sync_batch_norm.stats", process_set=process_set)
        counts, means, variances = stats[:, :1], stats[:, 1:channels + 1], stats[:, channels + 1:]
        total = float(counts.sum())
        if total <= 1:
            raise ValueError("Expected more than 1 value per channel when training, got a global batch of %d"
                             % int(total))
        mean = (counts * means).sum(0) / total
        var = (counts * (variances + (means - mean) ** 2)).sum(0) / total
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_((var * (total / (total - 1))).to(running_var.dtype),
                                                    alpha=momentum)
        mean, invstd = mean.to(x.dtype), torch.rsqrt(var + eps).to(x.dtype)
        out = (x - _channel_view(mean, x.dim())) * _channel_view(invstd, x.dim())
        if weight is not None:
            out = out * _channel_view(weight.to(x.dtype), x.dim()) + _channel_view(bias.to(x.dtype), x.dim())
        ctx.save_for_backward(input, weight, mean, invstd)
        ctx.total, ctx.process_set = total, process_set
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, mean, invstd = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[:3]
        ndim = input.dim()
        dims = [0] + list(range(2, ndim))
        x = input.to(mean.dtype)
        dy = grad_output.to(mean.dtype)
        xmu = x - _channel_view(mean, ndim)
        sum_dy, sum_dy_xmu = dy.sum(dims), (dy * xmu).sum(dims)
        grad_input = grad_weight = grad_bias = None
        if need_input:
            # The input's gradient depends on every rank's values through the mean and the variance.
            sums = allreduce(torch.cat([sum_dy, sum_dy_xmu]), name="sync_batch_norm.grad", op=Sum,
                             process_set=ctx.process_set)
            mean_dy, mean_dy_xmu = sums[:mean.numel()] / ctx.total, sums[mean.numel():] / ctx.total
            scale = invstd if weight is None else invstd * weight.to(mean.dtype)
            grad_input = ((dy - _channel_view(mean_dy, ndim) - xmu * _channel_view(invstd ** 2 * mean_dy_xmu, ndim))
                          * _channel_view(scale, ndim)).to(input.dtype)
        if weight is not None and need_weight:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
        if weight is not None and need_bias:
            grad_bias = sum_dy.to(weight.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
