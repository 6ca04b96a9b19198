"""Which variable a gradient collective belongs to, for stall reports: the tape and the optimizers set labels
for the collectives they are about to create, and the collective wrappers register them under the name the
core negotiates (graph: the node name; eager: the given name, else the op type), once per name."""
import contextlib
import threading

import tensorflow as tf

from tfring.common.monitor import label_group, variable_label as of_variable  # noqa: F401

_ctx = threading.local()


@contextlib.contextmanager
def given(labels):
    """Labels (a list parallel to the next collective's tensors; None entries: no label) while inside."""
    old = getattr(_ctx, "labels", None)
    _ctx.labels = labels
    try:
        yield
    finally:
        _ctx.labels = old


def current():
    """The labels set by `given`, or None."""
    return getattr(_ctx, "labels", None)


def register(op_type, result, given_name, ignore_name_scope, labels):
    """Registers labels for one collective op's tensors: call it before creating the op when executing eagerly
    (result None: the op runs at once, and a stall must already find its labels), after it in a graph (result:
    one output of the op, whose node names the collective; the op runs later).

    Args:
        op_type: the op's type (its eager name when unnamed).
        result: one output of the op (graph), or None (eager).
        given_name: the name the caller gave (None: derived).
        ignore_name_scope: as passed to the op.
        labels: one per tensor of the op, or None.
    """
    if not labels or not any(labels) or (result is None) != tf.executing_eagerly():
        return
    if result is not None:
        base = result.op.name
        if ignore_name_scope:
            base = base.rsplit("/", 1)[-1]
    else:
        base = given_name or op_type
    label_group([base] if len(labels) == 1 else ["%s_%d" % (base, i) for i in range(len(labels))], labels)
