"""Gradient compression for tfring.mxnet (Horovod's `horovod.mxnet.compression`): what is sent is compressed,
the result decompressed back to the gradient's dtype."""
import numpy as np

from tfring.common.compression import Compressor, NoneCompressor, compressions  # noqa: F401 (public here too)


FP16Compressor, _, Compression = compressions(
    lambda t: np.issubdtype(t.dtype, np.floating), lambda t, dtype: t.astype(dtype), np.float16,
    no_bf16="MXNet 1.9's bfloat16 exists only inside its MKLDNN operators (no NDArray cast or MPI type to send it)")
