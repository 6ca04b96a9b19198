"""Which collective library a benchmark job measures. The same scripts run against tfring and, given an
environment that has it (TF 2.15, `run_all.py --horovod-python`), against Horovod 0.28.1."""
import json
import os
import resource

IMPLS = ("tfring", "horovod")


def load(name, keras_api=False):
    """The library's TF module (or its Keras module) under Horovod's usual alias."""
    if name == "tfring":
        import tfring.keras as kmod
        import tfring as mod
    elif name == "horovod":
        import horovod.tensorflow as mod
        import horovod.tensorflow.keras as kmod
    else:
        raise ValueError("impl=%r: expected one of %s" % (name, ", ".join(IMPLS)))
    return kmod if keras_api else mod


def minor_faults():
    """Minor page faults of this process so far: what first touch of freshly mapped memory costs."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def write_json(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
