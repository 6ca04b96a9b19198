"""horovod.common.util: the version helper Horovod's tests import."""
from packaging import version


def is_version_greater_equal_than(ver, target):
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError("is_version_greater_equal_than takes two strings, got %r and %r" % (ver, target))
    return version.parse(ver) >= version.parse(target)
