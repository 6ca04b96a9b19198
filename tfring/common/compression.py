"""The compression interface every binding shares (no framework imported): `compress` before a collective,
`decompress` after it. Each binding adds its casts (tfring/tensorflow/compression.py, tfring/torch/compression.py).
`Compression.powersgd` is the DistributedOptimizers' low-rank compression (tfring/common/powersgd.py)."""
from tfring.common.powersgd import PowerSGD


class Compressor:
    """Interface of a compression: `compress` before the collective, `decompress` after it."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and what decompress needs.

        Args:
            tensor: the tensor to send.

        Returns:
            tuple: (tensor to send, context for `decompress`).
        """
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """Undoes compress.

        Args:
            tensor: the collective's result.
            ctx: the context `compress` returned.

        Returns:
            The tensor in its original form.
        """
        return tensor


class NoneCompressor(Compressor):
    """No compression (the default): tensors travel as they are."""


class CastCompressor(Compressor):
    """Floating tensors travel as `wire_dtype`, back to their dtype after; other dtypes (integers, bool) and
    tensors already of `wire_dtype` as they are. A binding gives `_is_floating(tensor)` and `_cast(tensor, dtype)`
    (static) and the wire dtypes; the rule is this one for every binding.

    Attributes:
        wire_dtype: the framework's 16-bit float dtype.
    """

    wire_dtype = None

    @staticmethod
    def _is_floating(tensor):
        """Whether the tensor's dtype is a floating one."""
        raise NotImplementedError

    @staticmethod
    def _cast(tensor, dtype):
        """The tensor in dtype."""
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor):
        """Casts a floating tensor of another dtype to `wire_dtype`.

        Args:
            tensor: the tensor to send (concrete or traced).

        Returns:
            tuple: (the cast tensor, its original dtype), or (tensor, None) when it is not cast.
        """
        if cls._is_floating(tensor) and tensor.dtype != cls.wire_dtype:
            return cls._cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        """Casts back to the original dtype.

        Args:
            tensor: the collective's result.
            ctx: the original dtype, or None (left as it is).

        Returns:
            The tensor in its original dtype.
        """
        return cls._cast(tensor, ctx) if ctx is not None else tensor


class _Missing(type):
    """The metaclass of a binding's Compression without bfloat16: asking for it says why, by name."""

    def __getattr__(cls, name):
        if name == "bf16" and cls._no_bf16:
            raise AttributeError("Compression.bf16: %s; use Compression.fp16" % cls._no_bf16)
        raise AttributeError("type object 'Compression' has no attribute %r" % name)


def compressions(is_floating, cast, fp16, bf16=None, no_bf16=None):
    """A binding's compressors and its `Compression` namespace (Horovod's names): float16 and, where the
    framework has it, bfloat16 casts on the wire.

    Args:
        is_floating: `is_floating(tensor)` of the framework.
        cast: `cast(tensor, dtype)` of the framework.
        fp16: the framework's float16 dtype.
        bf16: its bfloat16 dtype, or None.
        no_bf16: without bf16, why (the message of `Compression.bf16`'s AttributeError).

    Returns:
        tuple: (FP16Compressor, BF16Compressor or None, Compression).
    """
    hooks = {"_is_floating": staticmethod(is_floating), "_cast": staticmethod(cast)}
    fp16_cls = type("FP16Compressor", (CastCompressor,), dict(
        hooks, wire_dtype=fp16, __doc__="Floating tensors travel as float16 (half the bytes of float32; less range "
                                        "and precision)."))
    bf16_cls = None if bf16 is None else type("BF16Compressor", (CastCompressor,), dict(
        hooks, wire_dtype=bf16, __doc__="Floating tensors travel as bfloat16 (float32's range, 8 bits of mantissa)."))
    members = {"none": NoneCompressor, "fp16": fp16_cls, "powersgd": PowerSGD, "__doc__": "The compressions for "
               "`compression=` of the collectives and optimizers (Horovod's names): `Compression.none` (default), "
               "`.fp16`%s; and for the DistributedOptimizers `.powersgd(rank=1, warmup_steps=0, min_size=4096)`, a "
               "low-rank approximation with error feedback." % ("" if bf16 is None else ", `.bf16`")}
    if bf16_cls is not None:
        members["bf16"] = bf16_cls
    members["_no_bf16"] = None if bf16_cls is not None else no_bf16
    return fp16_cls, bf16_cls, _Missing("Compression", (), members)
