"""What every rank of an elastic slot job runs for a call (the value with the rank that returned it; an exception
names its rank), and Horovod's renamed size arguments the Spark and Ray elastic APIs accept."""
import re
import warnings

NOTE = "(tfring rank %d)"
NOTE_RE = re.compile(r"^\(tfring rank (\d+)\)$", re.M)


def renamed_sizes(min_num_proc, max_num_proc, min_np, max_np, stacklevel):
    """(min_num_proc, max_num_proc), taking Horovod's deprecated min_np / max_np (a DeprecationWarning each, pointing
    `stacklevel` frames up: the user's call) in their place, as the Spark and Ray elastic APIs both accept them."""
    for old, value in (("min_np", min_np), ("max_np", max_np)):
        if value is not None:
            warnings.warn("%s is deprecated, use %s instead" % (old, old.replace("np", "num_proc")),
                          DeprecationWarning, stacklevel=stacklevel + 1)
    return (min_num_proc if min_np is None else min_np), (max_num_proc if max_np is None else max_np)


def _rank():
    from tfring.common import basics
    return basics.rank() if basics.is_initialized() else None


def ranked(fn, args, kwargs):
    """What every rank runs: fn's value with the rank that returned it (ranks are renumbered by resets); an
    exception carries the rank in a note (the driver's RankError names it)."""
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:
        if _rank() is not None:
            e.add_note(NOTE % _rank())
        raise
    return _rank(), value
