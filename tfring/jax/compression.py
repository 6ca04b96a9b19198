"""Gradient compression around allreduce for JAX arrays (Horovod's `Compression`): floating arrays travel as a
16-bit float, back to their dtype after. Plain `astype` casts, so it works on traced arrays inside jax.jit too.

Only jax is imported here, so `tfring.jax._collectives` can import it without a cycle."""
import jax.numpy as jnp

from tfring.common.compression import Compressor, NoneCompressor  # noqa: F401 (public here too)


class _CastCompressor(Compressor):
    """Floating arrays travel as `wire_dtype`; other dtypes (integers, bool) as they are."""
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        """Casts a floating array of another dtype to `wire_dtype`.

        Args:
            tensor: the JAX array to send (concrete or traced).

        Returns:
            tuple: (the array to send, its original dtype), or (tensor, None) when it is not cast.
        """
        if jnp.issubdtype(tensor.dtype, jnp.floating) and tensor.dtype != cls.wire_dtype:
            return tensor.astype(cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        """Casts back to the original dtype.

        Args:
            tensor: the collective's result.
            ctx: the original dtype, or None (left as it is).

        Returns:
            The array in its original dtype.
        """
        return tensor.astype(ctx) if ctx is not None else tensor


class FP16Compressor(_CastCompressor):
    """Floating arrays travel as float16 (half the bytes of float32; less range and precision)."""
    wire_dtype = jnp.float16


class BF16Compressor(_CastCompressor):
    """Floating arrays travel as bfloat16 (float32's range, 8 bits of mantissa)."""
    wire_dtype = jnp.bfloat16


class Compression:
    """The compressions, for `compression=` of allreduce, grouped_allreduce and DistributedOptimizer (Horovod's
    names).

    `Compression.none` (default), `Compression.fp16`, `Compression.bf16`.
    """
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


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
