"""tfring on Ray: `RayExecutor` runs tfring workers as Ray actors, with Horovod's horovod.ray API.

    from tfring.ray import RayExecutor
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start()
    print(executor.run(train))   # train() runs in every rank: tfring.init(), then Keras as usual
    executor.shutdown()

`ElasticRayExecutor` (tfring.ray.elastic, with `RayHostDiscovery` and `TestDiscovery`) runs an elastic job on one
actor per discovered slot; `ray_logger.log(dict)` sends a rank's values to its `run(fn, callbacks=...)`.

Ray is imported only when RayExecutor is used: the ranks import this package for their side of the calls and need
no Ray."""

__all__ = ["RayExecutor", "Settings", "ElasticRayExecutor", "ray_logger"]
_ELASTIC = ("ElasticRayExecutor",)


def __getattr__(name):
    if name == "ray_logger":  # a submodule: imported by name, not through this package's attributes
        import importlib
        return importlib.import_module("tfring.ray.ray_logger")
    if name in _ELASTIC:
        from tfring.ray import elastic
        return getattr(elastic, name)
    if name in __all__:
        from tfring.ray import executor
        return getattr(executor, name)
    raise AttributeError("module 'tfring.ray' has no attribute %r" % name)
