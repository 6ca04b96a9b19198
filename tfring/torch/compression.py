"""Gradient compression around allreduce (Horovod's `horovod.torch.compression`): cast to a 16-bit float for the
wire, back to the original dtype after.

Only torch is imported here, so `tfring.torch.mpi_ops` can import `Compression` without a cycle."""
import torch

from tfring.common.compression import Compressor, NoneCompressor  # noqa: F401 (public here too)


class _CastCompressor(Compressor):
    """Floating tensors travel as `wire_dtype`; other dtypes (integers, bool) as they are."""
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        """Casts a floating tensor to `wire_dtype`.

        Args:
            tensor: the tensor to send.

        Returns:
            tuple: (the tensor to send, its original dtype).
        """
        if tensor.dtype.is_floating_point:
            return tensor.to(cls.wire_dtype), tensor.dtype
        return tensor, tensor.dtype

    @classmethod
    def decompress(cls, tensor, ctx):
        """Casts back to the original dtype.

        Args:
            tensor: the collective's result.
            ctx: the original dtype (None: leave the tensor as it is).

        Returns:
            The tensor in its original dtype.
        """
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.to(ctx)
        return tensor


class FP16Compressor(_CastCompressor):
    """Floating tensors travel as float16 (half the bytes of float32; less range and precision)."""
    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Floating tensors travel as bfloat16 (float32's range, 8 bits of mantissa); not in Horovod 0.28.1's torch
    binding, offered as in tfring's TensorFlow one."""
    wire_dtype = torch.bfloat16


class Compression:
    """The compressions for `DistributedOptimizer(compression=...)` and `allreduce(compression=...)`.

    `Compression.none` (default), `Compression.fp16`, `Compression.bf16`.
    """
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
