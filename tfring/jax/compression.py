"""Gradient compression around allreduce for JAX arrays (Horovod's `Compression`): floating arrays travel as a
16-bit float, back to their dtype after. Plain `astype` casts, so it works on traced arrays inside jax.jit too.

Only jax is imported here, so `tfring.jax._collectives` can import it without a cycle."""
import jax.numpy as jnp

from tfring.common.compression import Compressor, NoneCompressor, compressions  # noqa: F401 (public here too)


FP16Compressor, BF16Compressor, Compression = compressions(lambda t: jnp.issubdtype(t.dtype, jnp.floating),
                                                          lambda t, dtype: t.astype(dtype), jnp.float16,
                                                          jnp.bfloat16)


def checked(fn, compression):
    """Returns `compression` if it is a compressor (has callable compress and decompress), else raises.

    Args:
        fn: the public function's name, for the message.
        compression: the value passed as `compression=`.

    Returns:
        The compressor, unchanged.

    Raises:
        ValueError: `compression` is not a compressor (e.g. the string "fp16" or None).
    """
    if not (callable(getattr(compression, "compress", None)) and callable(getattr(compression, "decompress", None))):
        raise ValueError("tfring.jax.%s: compression must be tfring.jax.Compression.none, .fp16 or .bf16 (or a "
                         "Compressor with compress/decompress), got %r" % (fn, compression))
    return compression
