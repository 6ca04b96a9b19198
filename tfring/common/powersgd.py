"""PowerSGD (Vogels et al., 2019): a DistributedOptimizer's gradients sent as a rank-r approximation with error
feedback, framework-free. A binding gives its linear algebra (`LinearAlgebra`) and a grouped allreduce; the rule
(which tensors are compressed, the two allreduce rounds, the error kept for the next step) is this one for all.

For a gradient reshaped to an n x m matrix M (this step's gradient plus the error left from the last), with Q the
m x r matrix kept from the last step (random at first, the same on every rank):
    P = allreduce(M Q);  P = orthonormal(P);  Q = allreduce(M^T P);  approximation = P Q^T;  error = M - approximation
so (n + m) r numbers travel instead of n m, and the approximation is P P^T times the reduced M. Tensors that are
1-D, smaller than `min_size` elements, or that rank r would not halve travel uncompressed in the first round."""
import numbers

import numpy as np


class PowerSGD:
    """PowerSGD's settings: passed as `compression=` of a DistributedOptimizer (`Compression.powersgd(...)`).

    Args:
        rank: the approximation's rank r (1-4 typically; higher is closer to the gradient and sends more).
        warmup_steps: steps sent uncompressed first (as torch's start_powerSGD_iter): the early gradients change
            fastest.
        min_size: tensors with fewer elements travel uncompressed (with 1-D tensors and those rank r would not
            halve).
        seed: seeds the first Q of each tensor, the same on every rank.

    Raises:
        ValueError: an argument that is not a non-negative int (rank and min_size: positive).
    """

    def __init__(self, rank=1, warmup_steps=0, min_size=4096, seed=0):
        for arg, value, low in (("rank", rank, 1), ("warmup_steps", warmup_steps, 0), ("min_size", min_size, 1),
                                ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise ValueError("PowerSGD: %s=%r must be an int >= %d" % (arg, value, low))
        self.rank, self.warmup_steps, self.min_size, self.seed = int(rank), int(warmup_steps), int(min_size), int(seed)

    def __repr__(self):
        return "PowerSGD(rank=%d, warmup_steps=%d, min_size=%d, seed=%d)" % (
            self.rank, self.warmup_steps, self.min_size, self.seed)

    def __eq__(self, other):
        return isinstance(other, PowerSGD) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash(repr(self))

    def get_config(self):
        """The settings as a dict.

        Returns:
            dict: the constructor's arguments.
        """
        return dict(rank=self.rank, warmup_steps=self.warmup_steps, min_size=self.min_size, seed=self.seed)

    @staticmethod
    def compress(tensor):
        """Refused: PowerSGD keeps state between steps and needs two rounds, so it is a DistributedOptimizer's
        compression, not a single collective's.

        Args:
            tensor: the tensor a collective was given.

        Raises:
            ValueError: always, naming what to use instead.
        """
        raise ValueError("compression=PowerSGD applies to a DistributedOptimizer's gradients (it keeps an error and "
                         "a Q matrix per tensor between steps); a single collective takes Compression.none, .fp16 "
                         "or .bf16")

    @staticmethod
    def decompress(tensor, ctx=None):
        """Refused, as `compress`.

        Args:
            tensor: the collective's result.
            ctx: unused.

        Raises:
            ValueError: always.
        """
        PowerSGD.compress(tensor)

    def matrix_shape(self, shape):
        """The (n, m) matrix a tensor of `shape` is sent as, or None when it travels uncompressed.

        Args:
            shape: the gradient's shape (a sequence of ints).

        Returns:
            tuple or None
        """
        shape = tuple(int(d) for d in shape)
        if len(shape) < 2:
            return None
        n, m = shape[0], int(np.prod(shape[1:]))
        if n * m < self.min_size or 2 * (n + m) * self.rank > n * m:
            return None
        return n, m

    def initial_q(self, m, index):
        """Tensor `index`'s first Q: m x rank standard normal, float32, the same on every rank.

        Args:
            m: the matrix's columns.
            index: the tensor's position among the optimizer's gradients.

        Returns:
            numpy.ndarray
        """
        return np.random.default_rng([self.seed, int(index)]).standard_normal((m, self.rank)).astype(np.float32)

    def wire_elements(self, shapes):
        """How many elements one compressed step sends per rank for tensors of these shapes (both rounds).

        Args:
            shapes: the gradients' shapes.

        Returns:
            int
        """
        total = 0
        for shape in shapes:
            nm = self.matrix_shape(shape)
            total += int(np.prod(shape)) if nm is None else (nm[0] + nm[1]) * self.rank
        return total


def settings(compression):
    """The `PowerSGD` settings of a `compression=` argument, or None when it is not PowerSGD.

    Args:
        compression: a compression; `Compression.powersgd` itself stands for its defaults.

    Returns:
        PowerSGD or None
    """
    if compression is PowerSGD:
        return PowerSGD()
    return compression if isinstance(compression, PowerSGD) else None


class LinearAlgebra:
    """A binding's matrix operations on its own 2-D tensors (concrete or traced)."""

    @staticmethod
    def matmul(a, b):
        """a @ b."""
        raise NotImplementedError

    @staticmethod
    def matmul_tn(a, b):
        """a^T @ b."""
        raise NotImplementedError

    @staticmethod
    def matmul_nt(a, b):
        """a @ b^T."""
        raise NotImplementedError

    @staticmethod
    def orthonormal(p):
        """An orthonormal basis of p's columns (a QR's Q), the same on every rank for the same p."""
        raise NotImplementedError


def round_trip(matrices, qs, errors, plain, allreduce, la):
    """One compressed step: the two allreduce rounds (the uncompressed tensors travel in the first).

    Args:
        matrices: the compressed gradients as n x m matrices (this step's, without the error).
        qs: their m x r Q from the last step.
        errors: their n x m errors from the last step.
        plain: the gradients that travel as they are.
        allreduce: reduces a list of tensors in one grouped collective (the optimizer's op and scaling); returns
            the list.
        la: the binding's `LinearAlgebra`.

    Returns:
        tuple: (approximations, new qs, new errors, reduced plain), lists in the order given.
    """
    ms = [g + e for g, e in zip(matrices, errors)]
    first = allreduce([la.matmul(mat, q) for mat, q in zip(ms, qs)] + list(plain))
    ps = [la.orthonormal(p) for p in first[:len(ms)]]
    new_qs = allreduce([la.matmul_tn(mat, p) for mat, p in zip(ms, ps)]) if ms else []
    approx = [la.matmul_nt(p, q) for p, q in zip(ps, new_qs)]
    return approx, new_qs, [mat - a for mat, a in zip(ms, approx)], first[len(ms):]


def compress_step(grads, shapes, compressed, plain, qs, errors, allreduce, la, reshape):
    """`round_trip` on the gradients as they are: the compressed ones reshaped to their matrices and back.

    Args:
        grads: the step's gradients (binding tensors), indexed by `compressed` and `plain`.
        shapes: index -> (n, m) of each compressed gradient.
        compressed, plain: indices of the gradients that are compressed and of those that travel as they are.
        qs, errors: the compressed gradients' Q and error from the last step, in `compressed` order.
        allreduce, la: as for `round_trip`.
        reshape: reshape(tensor, shape).

    Returns:
        tuple: (the reduced gradients in `compressed + plain` order, new qs, new errors).
    """
    approx, new_qs, new_errors, reduced = round_trip(
        [reshape(grads[i], shapes[i]) for i in compressed], list(qs), list(errors), [grads[i] for i in plain],
        allreduce, la)
    return [reshape(a, tuple(grads[i].shape)) for a, i in zip(approx, compressed)] + reduced, new_qs, new_errors


def placed(base, order, values):
    """`base` as a list with values[k] at index order[k]."""
    out = list(base)
    for i, v in zip(order, values):
        out[i] = v
    return out


class EagerState:
    """PowerSGD's state kept in Python between eager steps (torch; TensorFlow eagerly): the step count and, per
    compressed tensor, its Q and error, made on first use.

    Args:
        config: the `PowerSGD` settings (or the class itself: its defaults).
        la: the binding's `LinearAlgebra`.
        from_numpy: makes a binding tensor like `like` (dtype, device) from a numpy array: from_numpy(array, like).
        zeros_like: the binding's zeros_like.
        reshape: reshape(tensor, shape).
    """

    def __init__(self, config, la, from_numpy, zeros_like, reshape):
        self.config, self.la = settings(config), la
        self._from_numpy, self._zeros_like, self._reshape = from_numpy, zeros_like, reshape
        self.steps = 0
        self.qs, self.errors = {}, {}

    def reduce(self, keys, grads, allreduce):
        """Reduces one step's gradients.

        Args:
            keys: a stable key per gradient (its position, or its parameter's name).
            grads: the gradients (dense binding tensors).
            allreduce: the grouped allreduce (see `round_trip`).

        Returns:
            list: the reduced gradients, in order, shaped as given.
        """
        self.steps += 1
        if self.steps <= self.config.warmup_steps:
            return allreduce(list(grads))
        compressed, plain, shapes = [], [], {}
        for i, (key, g) in enumerate(zip(keys, grads)):
            nm = self.config.matrix_shape(g.shape)
            if nm is None:
                plain.append(i)
                continue
            compressed.append(i)
            shapes[i] = nm
            if key not in self.qs:
                self.qs[key] = self._from_numpy(self.config.initial_q(nm[1], i), g)
                self.errors[key] = self._zeros_like(self._reshape(g, nm))
        ckeys = [keys[i] for i in compressed]
        out, qs, errors = compress_step(grads, shapes, compressed, plain, [self.qs[k] for k in ckeys],
                                        [self.errors[k] for k in ckeys], allreduce, self.la, self._reshape)
        for k, q, e in zip(ckeys, qs, errors):
            self.qs[k], self.errors[k] = q, e
        return placed(grads, compressed + plain, out)
