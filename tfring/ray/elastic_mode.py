"""RayExecutor's elastic mode (Horovod 0.28's `RayExecutor(settings, min_workers=..., max_workers=...)`): the same
methods as the fixed-size executor, each run an elastic job on tfring.ray.elastic.ElasticRayExecutor (actors live
for one run: workers are ephemeral, so `run_remote` and `execute_single` are refused, as in Horovod)."""
import functools

from tfring.ray.elastic import ElasticRayExecutor, ElasticSettings


def _call(fn, args, kwargs):
    return fn(*args, **kwargs)


def _execute(fn, cls, args, kwargs):
    return fn(cls(*args, **kwargs) if cls is not None else None)


class ElasticModeExecutor:
    """What `RayExecutor(..., min_workers=N)` returns (arguments: RayExecutor's; see tfring.ray.elastic)."""

    def __init__(self, settings, min_workers, max_workers=None, reset_limit=None, elastic_timeout=600,
                 override_discovery=True, cpus_per_worker=1, use_gpu=False, gpus_per_worker=None):
        timeout = getattr(settings, "timeout_s", 300) if settings is not None else 300
        self.settings = ElasticSettings(
            discovery=getattr(settings, "discovery", None), min_num_proc=min_workers, max_num_proc=max_workers,
            num_proc=min_workers, elastic_timeout=elastic_timeout, reset_limit=reset_limit, timeout_s=timeout,
            nics=getattr(settings, "nics", None), verbose=getattr(settings, "verbose", 1))
        self._args = dict(use_gpu=use_gpu, cpus_per_slot=cpus_per_worker, gpus_per_slot=gpus_per_worker,
                          override_discovery=override_discovery)
        self._elastic = None
        self._executable = (None, (), {})

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Checks Ray and the discovery; executable_cls is built in every rank of each `execute`."""
        self._elastic = ElasticRayExecutor(self.settings, env_vars=extra_env_vars, **self._args)
        self._elastic.start()
        self._executable = (executable_cls, tuple(executable_args or ()), dict(executable_kwargs or {}))

    def _started(self):
        if self._elastic is None:
            raise RuntimeError("tfring.ray: the executor is not started (call start() first)")
        return self._elastic

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """fn(*args, **kwargs) as an elastic job: the final ranks' values, in rank order."""
        job = functools.partial(_call, fn, tuple(args or ()), dict(kwargs or {}))
        return self._started().run(job, callbacks=callbacks)

    def execute(self, fn, callbacks=None):
        """fn(executable) as an elastic job, with executable_cls built in every rank."""
        cls, args, kwargs = self._executable
        return self._started().run(functools.partial(_execute, fn, cls, args, kwargs), callbacks=callbacks)

    def run_remote(self, fn, args=None, kwargs=None):
        raise NotImplementedError("tfring.ray: run_remote in elastic mode: the workers live for one run; use run()")

    def execute_single(self, fn):
        raise NotImplementedError("tfring.ray: execute_single in elastic mode: use execute()")

    def shutdown(self):
        """Nothing to end between runs (each run's actors end with it)."""
        self._elastic = None
