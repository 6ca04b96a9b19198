"""What the job is doing, from the core's monitor: every rank's time waiting in collectives, transfer time,
bytes reduced and bus bandwidth, and the rank the others wait for (a straggler). Rank 0 gathers every rank's
numbers in the monitor's rounds (every 4 steps or TFRING_MONITOR_INTERVAL_SECONDS) and broadcasts a summary, so
`metrics()` returns the same job-wide view on every rank. See docs/observability.md."""
import json

from tfring.common import library as _lib
from tfring.common.topology import is_initialized


def metrics():
    """The latest monitor round's summary, identical on every rank.

    Returns:
        dict or None (before the first round, or when tfring is not initialized): `steps`, `seconds` and
        `step_ms` of the round; `ranks`, one dict per rank with `wait_ms` (time something it submitted waited
        for the other ranks), `wait_ms_per_step`, `transfer_ms`, `bytes_reduced`, `collectives`, `busbw_gbps`
        and `total` (the same since init); `slowest` (the rank the others waited for most, and how long per step)
        and `straggler` (the same once it persists beyond the threshold: what the warning names; else None).
    """
    if not is_initialized():
        return None
    raw = _lib.core().tfring_metrics()
    return json.loads(raw.decode()) if raw else None


def straggler():
    """The rank the others persistently wait for, or None.

    Returns:
        dict or None: `rank`, `waited_ms_per_step` and `steps` (the evidence), as in `metrics()["straggler"]`.
    """
    m = metrics()
    return m["straggler"] if m else None


def mark_step():
    """Says a training step ended on this rank. Optional: without marks, the monitor counts how often the most
    frequent collective ran (each gradient is reduced once per step). The Keras callback marks every batch."""
    if is_initialized():
        _lib.core().tfring_mark_step()


_labelled = {}


def label_group(names, labels):
    """Registers labels for collectives by name, each once (a training loop labels the same names every step).

    Args:
        names: negotiated names.
        labels: one per name (None or "": no label).
    """
    for name, label in zip(names, labels):
        if label and _labelled.get(name) != label:
            _labelled[name] = label
            label_tensor(name, label)


def variable_label(var):
    """The stall-report label of var's gradient: "gradient of <its path or name>"."""
    return "gradient of %s" % (getattr(var, "path", None) or getattr(var, "name", None) or "a variable")


def label_tensor(name, label):
    """Shows `label` next to the collective `name` in stall reports.

    Args:
        name: the collective's negotiated name.
        label: what the user calls it, e.g. "gradient of dense_1/kernel".
    """
    _lib.core().tfring_set_tensor_label(str(name).encode(), str(label).encode())
