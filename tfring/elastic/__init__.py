"""Horovod's elastic training (`hvd.elastic.run`, `State`, `KerasState`, the commit/reset callbacks) is not built
yet (issue #15). The module exists so a migrated script fails at the first elastic name with a message that says
so, instead of an AttributeError deep in the script."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError("tfring.elastic.%s: elastic training (workers joining and leaving a running job) is "
                              "not built yet; run a fixed-size job with tfringrun -np N" % name)
