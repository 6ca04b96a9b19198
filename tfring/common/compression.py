"""The compression interface every binding shares (no framework imported): `compress` before a collective,
`decompress` after it. Each binding adds its casts (tfring/tensorflow/compression.py, tfring/torch/compression.py)."""


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
