"""Gradient compression around allreduce (Horovod's `horovod.torch.compression`): cast to a 16-bit float for the
wire, back to the original dtype after.

Only torch is imported here, so `tfring.torch.mpi_ops` can import `Compression` without a cycle."""
import torch

from tfring.common.compression import Compressor, NoneCompressor, compressions  # noqa: F401 (public here too)


FP16Compressor, BF16Compressor, Compression = compressions(lambda t: t.dtype.is_floating_point,
                                                          lambda t, dtype: t.to(dtype), torch.float16,
                                                          torch.bfloat16)
