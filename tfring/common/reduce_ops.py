"""The reduce ops (Horovod's `Average`, `Sum`, `Adasum`, `Min`, `Max`, `Product`), their values read from the
core (cc/common/types.h), and the one resolver every binding uses for Horovod's `op=` / deprecated `average=`."""
import warnings

from tfring.common import library


def _value(name):
    value = library.core().tfring_reduce_op(name.encode())
    if value < 0:
        raise ImportError("tfring's core library does not know the reduce op %r; rebuild tfring. %s"
                          % (name, library.REBUILD))
    return value


Average, Sum, Adasum, Min, Max, Product = (_value(n) for n in ("Average", "Sum", "Adasum", "Min", "Max", "Product"))
NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}


class ReduceOp:
    """The reduce ops as class attributes (`ReduceOp.SUM`, ...), the same ints as `Sum` and friends."""
    AVERAGE, SUM, ADASUM, MIN, MAX, PRODUCT = Average, Sum, Adasum, Min, Max, Product


def check_op(fn, op, adasum=True):
    """ValueError naming `fn` and `op` unless `op` is a reduce op (Adasum only where `adasum`)."""
    if isinstance(op, bool) or op not in NAMES or (op == Adasum and not adasum):
        raise ValueError("tfring.%s: op=%r is not supported; use Average, Sum, Min, Max or Product%s"
                         % (fn, op, " (or Adasum)" if adasum else ""))


def resolve_op(fn, op, average, adasum=True):
    """Horovod's `op=` / deprecated `average=` pair: Average when neither is given; passing both is an error;
    `average=` warns (DeprecationWarning), as Horovod's.

    Args:
        fn: the public function's name, for messages.
        op: a reduce op or None.
        average: True (Average), False (Sum) or None.
        adasum: whether `fn` accepts Adasum.

    Returns:
        int: the reduce op.

    Raises:
        ValueError: both were given, or `op` is not a reduce op.
    """
    if average is not None:
        if op is not None:
            raise ValueError("tfring.%s: pass either op or the deprecated average (only one: op supersedes "
                             "average), not both" % fn)
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed", DeprecationWarning,
                      stacklevel=3)
        op = Average if average else Sum
    op = Average if op is None else op
    check_op(fn, op, adasum)
    return op


def check_adasum(fn, set_size):
    """Adasum combines pairs of ranks by recursive doubling: a power-of-two number of ranks (Horovod raises
    NotImplementedError for other sizes)."""
    if not check_num_rank_power_of_2(set_size or 0):
        raise NotImplementedError("tfring.%s: op=Adasum needs a power-of-two number of ranks in the process set, "
                                  "got %s" % (fn, set_size))


def check_num_rank_power_of_2(num_rank):
    """Horovod's helper: whether `num_rank` is a power of two (what Adasum needs).

    Args:
        num_rank: a number of ranks.

    Returns:
        bool: True for 1, 2, 4, 8, ...
    """
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def handle_average_backwards_compatibility(op, average):
    """Horovod's helper: the reduce op meant by `op` and the deprecated `average` flag.

    Args:
        op: a reduce op (`Average`, `Sum`, `Adasum`, `Min`, `Max`, `Product`) or None.
        average: the deprecated flag: True means `Average`, False `Sum`, None defers to `op`.

    Returns:
        int: the reduce op (`Average` when both are None).

    Raises:
        ValueError: both are given, or `op` is not a reduce op.
    """
    return resolve_op("allreduce", op, average)
