"""What every binding's gradient reducer decides before it communicates, framework-free: whether this rank
reduces over a process set at all, Horovod's `groups` / `num_groups` arguments, and the grouped allreduces they
split a gradient list into. The TensorFlow tape and the Keras optimizer on every backend share it."""
import warnings

from tfring.common.process_sets import is_global, process_set_size


def communicates(process_set):
    """Whether gradients are reduced over process_set on this rank: it must be a member of a set of more than one
    rank. Otherwise they come back unchanged (Horovod's _allreduce_cond).

    Args:
        process_set: a `tfring.ProcessSet` or None (all ranks).

    Returns:
        bool

    Raises:
        ValueError: the set is not registered.
    """
    if process_set_size(process_set) <= 1:
        return False
    if is_global(process_set):
        return True
    included = process_set.included()
    return bool(process_set.rank() >= 0 if included is None else included)


def check_groups(who, groups, num_groups, is_variable, key):
    """Horovod's grouping arguments: an int splits the gradients into that many contiguous groups; a list of
    variable lists puts each list in one group (every other gradient is a group of its own). num_groups is the
    deprecated spelling of an int `groups`.

    Args:
        who: the caller's name, for messages.
        groups: None, an int >= 1, or a list of lists of variables.
        num_groups: the deprecated int (0: unset).
        is_variable: tells the framework's variables from other objects.
        key: a variable's hashable identity.

    Returns:
        None, an int >= 1, or a list of lists of variables.

    Raises:
        ValueError: the arguments are malformed, or a variable is listed twice.
    """
    if type(num_groups) is not int or num_groups < 0:
        raise ValueError("%s: num_groups=%r must be an int >= 0" % (who, num_groups))
    if num_groups:
        warnings.warn("%s: num_groups is deprecated (as in Horovod); use groups=%d" % (who, num_groups),
                      DeprecationWarning, stacklevel=4)
        if groups is None:
            groups = num_groups
    if groups is None:
        return None
    if type(groups) is int:
        if groups < 1:
            raise ValueError("%s: groups=%r must be an int >= 1 or a list of lists of variables" % (who, groups))
        return groups
    if not isinstance(groups, (list, tuple)):
        raise ValueError("%s: groups=%r must be an int >= 1 or a list of lists of variables" % (who, groups))
    seen = set()
    for group in groups:
        if not isinstance(group, (list, tuple)) or not all(is_variable(v) for v in group):
            raise ValueError("%s: groups must be a list of lists of variables; got the element %r" % (who, group))
        for v in group:
            if key(v) in seen:
                raise ValueError("%s: groups lists the variable %r more than once" % (who, v.name))
            seen.add(key(v))
    return [list(g) for g in groups]


def split_groups(who, groups, present, keys, key):
    """The index lists of the grouped allreduces that reduce the gradients at `present`.

    Args:
        who: the caller's name, for messages.
        groups: what `check_groups` returned.
        present: indices of the gradients to reduce.
        keys: every gradient's variable key (key(variable)), or None when the variables are unknown.
        key: a variable's hashable identity.

    Returns:
        list: lists of indices, one per grouped allreduce, none empty.

    Raises:
        ValueError: groups of variables, but the variables are unknown.
    """
    if groups is None:
        return [present] if present else []
    if isinstance(groups, int):
        d, r = divmod(len(present), groups)
        chunks = [present[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(groups)]
        return [c for c in chunks if c]
    if keys is None:
        raise ValueError("%s: groups as lists of variables needs the variables of the gradients" % who)
    where = {key(v): gi for gi, group in enumerate(groups) for v in group}
    split = [[] for _ in groups]
    alone = []
    for i in present:
        (split[where[keys[i]]] if keys[i] in where else alone).append(i)
    return [s for s in split if s] + [[i] for i in alone]
