"""tfring on Ray: `RayExecutor` runs tfring workers as Ray actors, with Horovod's horovod.ray API.

    from tfring.ray import RayExecutor
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start()
    print(executor.run(train))   # train() runs in every rank: tfring.init(), then Keras as usual
    executor.shutdown()

Ray is imported only when RayExecutor is used: the ranks import this package for their side of the calls and need
no Ray."""

__all__ = ["RayExecutor", "Settings"]


def __getattr__(name):
    if name in __all__:
        from tfring.ray import executor
        return getattr(executor, name)
    raise AttributeError("module 'tfring.ray' has no attribute %r" % name)
