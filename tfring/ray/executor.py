"""tfring.ray.RayExecutor: Horovod's RayExecutor API on tfring's slot launcher (tfring.runner.slots).

One Ray actor per worker, all in one placement group; the actors are the job's slots, so the ranks (MPI processes
started by mpirun, which runs in worker 0's actor) live as long as the actors do. start() launches persistent
ranks; run/execute send calls to them; shutdown() ends the ranks, mpirun, the actors and the placement group."""
import concurrent.futures
import dataclasses
import itertools
import sys
import time
import warnings

from tfring.ray import _rank
from tfring.ray.worker import MAX_CONCURRENCY, SlotWorker
from tfring.runner.processes import alive
from tfring.runner.slots import LaunchError, RankError


def _nic_set(nics):
    # "eth0" or "eth0,eth1" is one name list, not a set of characters.
    if not nics:
        return None
    return set(nics.split(",")) if isinstance(nics, str) else set(nics)


def _no_callbacks(callbacks):
    if callbacks:  # Horovod's fixed-size adapter accepts them too; here nothing would call them: say so once
        warnings.warn("tfring.ray: callbacks are not called in a fixed-size job (ray_logger needs an elastic job: "
                      "RayExecutor(..., min_workers=N) or ElasticRayExecutor)", stacklevel=3)


@dataclasses.dataclass
class Settings:
    """What RayExecutor.create_settings returns (Horovod's settings for Ray, minus what tfring does not use).

    Args:
        timeout_s: seconds the workers have to start and register (actors, slots and ranks), and the deadline of
            every wait of start() and shutdown().
        placement_group_timeout_s: seconds to wait for the placement group's resources.
        nics: network interfaces (or CIDR subnets) for MPI traffic, e.g. {"eth0"}; None: the interface on the
            route to the driver.
        verbose: 0 keeps tfring.ray's own messages quiet.
        ssh_identity_file: accepted for Horovod compatibility; unused (no ssh: the actors start the ranks).
    """
    timeout_s: int = 300
    placement_group_timeout_s: int = 100
    nics: set = None
    verbose: int = 1
    ssh_identity_file: str = None


class RayExecutor:
    """Runs tfring workers as Ray actors (Horovod's horovod.ray.RayExecutor API).

    Either num_workers (a PACK placement group: one bundle per worker, packed on as few nodes as possible) or
    num_hosts and num_workers_per_host (STRICT_SPREAD: one bundle per host holding all its workers).

    Args:
        settings: from `RayExecutor.create_settings` (None: the defaults).
        num_workers: the number of workers (= ranks).
        num_hosts: the number of hosts, instead of num_workers.
        num_workers_per_host: workers on each host (with num_hosts).
        cpus_per_worker: Ray CPUs reserved for each worker.
        use_gpu: reserve GPUs for the workers; refused when the Ray cluster has none.
        gpus_per_worker: Ray GPUs per worker when use_gpu (default 1).
        use_current_placement_group: when created inside a placement group (e.g. a Ray Tune trial), place the
            workers in it instead of creating one.
        min_workers: Horovod 0.28's elastic mode: with min_workers, RayExecutor(...) returns a
            tfring.ray.elastic_mode.ElasticModeExecutor (every run an elastic job on ElasticRayExecutor).
        max_workers: elastic mode: most workers (None: as many as the discovery offers).
        reset_limit: elastic mode: most resets.
        cooldown_range: accepted for Horovod compatibility and unused (no blacklisting of Ray hosts).
        elastic_timeout: elastic mode: seconds a reset may take and the wait below min_workers.
        override_discovery: elastic mode: use a RayHostDiscovery of these resources.

    Raises:
        ValueError: an inconsistent combination of arguments.
    """

    @classmethod
    def create_settings(cls, timeout_s=300, ssh_identity_file=None, ssh_str=None, placement_group_timeout_s=100,
                        nics=None):
        """The executor's settings (Horovod's signature).

        Args:
            timeout_s: see `Settings`.
            ssh_identity_file: unused: tfring starts no ssh (kept for Horovod compatibility).
            ssh_str: unused; never written anywhere (Horovod writes this private key to ssh_identity_file).
            placement_group_timeout_s: see `Settings`.
            nics: see `Settings`.

        Returns:
            Settings: the settings.
        """
        if ssh_str:
            warnings.warn("tfring.ray: ssh_str is ignored (tfring starts no ssh); the key was not written",
                          stacklevel=2)
        return Settings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s,
                        nics=_nic_set(nics), ssh_identity_file=ssh_identity_file)

    def __new__(cls, settings=None, num_workers=None, *args, min_workers=None, max_workers=None, **kwargs):
        # Horovod 0.28's elastic mode: min_workers (and max_workers) instead of num_workers (tfring.ray.elastic_mode).
        if min_workers is None and max_workers is None:
            return super().__new__(cls)
        if num_workers is not None or args or kwargs.get("num_hosts") is not None:
            raise ValueError("tfring.ray: give num_workers (fixed size) or min_workers/max_workers (elastic), not both")
        from tfring.ray.elastic_mode import ElasticModeExecutor
        forwarded = ("reset_limit", "elastic_timeout", "override_discovery", "cpus_per_worker", "use_gpu",
                     "gpus_per_worker")
        unknown = sorted(set(kwargs) - set(forwarded) - {"cooldown_range", "use_current_placement_group",
                                                          "num_workers_per_host"})
        if unknown:
            raise TypeError("tfring.ray: RayExecutor() got unexpected keyword arguments %s" % unknown)
        if not isinstance(min_workers, int) or min_workers < 1:
            raise ValueError("tfring.ray: min_workers=%r: expected a positive integer (elastic mode)" % (min_workers,))
        return ElasticModeExecutor(settings, min_workers, max_workers,
                                   **{k: v for k, v in kwargs.items() if k in forwarded})

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1, cpus_per_worker=1,
                 use_gpu=False, gpus_per_worker=None, use_current_placement_group=True, min_workers=None,
                 max_workers=None, reset_limit=None, cooldown_range=None, elastic_timeout=600,
                 override_discovery=True):
        if gpus_per_worker and not use_gpu:
            raise ValueError("tfring.ray: gpus_per_worker is set but use_gpu is False")
        if use_gpu and gpus_per_worker is not None and gpus_per_worker <= 0:
            raise ValueError("tfring.ray: gpus_per_worker must be positive, got %r" % (gpus_per_worker,))
        if num_workers is not None and num_hosts is not None:
            raise ValueError("tfring.ray: give num_workers or num_hosts (with num_workers_per_host), not both")
        if num_workers is None and num_hosts is None:
            raise ValueError("tfring.ray: give num_workers, or num_hosts and num_workers_per_host")
        if num_hosts is not None and (num_hosts < 1 or num_workers_per_host < 1):
            raise ValueError("tfring.ray: num_hosts and num_workers_per_host must be positive")
        if num_workers is not None and num_workers < 1:
            raise ValueError("tfring.ray: num_workers must be positive, got %r" % (num_workers,))
        self.settings = settings or Settings()
        self.num_hosts, self.num_workers_per_host = num_hosts, num_workers_per_host
        self.num_workers = num_workers if num_workers is not None else num_hosts * num_workers_per_host
        self.cpus_per_worker, self.use_gpu = cpus_per_worker, bool(use_gpu)
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.use_current_placement_group = use_current_placement_group
        self.workers = []  # actor handles, in rank order once started
        self.placement_group = None
        self._own_group = False
        self._job = self._serving = self._failed = None
        self._infos = []  # per worker (rank order): info() plus the rank's pid
        self._slot_infos = []  # info() per worker: by creation index during start(), by rank after
        self._remote = None  # run_remote's (Mailbox actor, one call thread, call counter, pending futures)

    # -- start --

    def _say(self, message):
        if self.settings.verbose:
            sys.stderr.write("tfring.ray: %s\n" % message)
            sys.stderr.flush()

    def _place(self):
        import ray
        from ray.util.placement_group import get_current_placement_group, placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        if self.use_gpu and not ray.cluster_resources().get("GPU"):
            raise ValueError("tfring.ray: use_gpu=True but the Ray cluster has no GPU resources (%s)" % (
                ", ".join("%s=%g" % kv for kv in sorted(ray.cluster_resources().items()) if "node:" not in kv[0])))
        per_worker = {"CPU": self.cpus_per_worker}
        if self.use_gpu:
            per_worker["GPU"] = self.gpus_per_worker
        current = get_current_placement_group() if self.use_current_placement_group else None
        if current is not None:
            self.placement_group, bundle = current, lambda i: -1
        else:
            if self.num_hosts is not None:
                bundles = [{k: v * self.num_workers_per_host for k, v in per_worker.items()}] * self.num_hosts
                strategy, bundle = "STRICT_SPREAD", lambda i: i // self.num_workers_per_host
            else:
                bundles, strategy, bundle = [per_worker] * self.num_workers, "PACK", lambda i: i
            self.placement_group, self._own_group = placement_group(bundles, strategy=strategy), True
            ready, _ = ray.wait([self.placement_group.ready()], timeout=self.settings.placement_group_timeout_s)
            if not ready:
                raise TimeoutError(
                    "tfring.ray: the placement group (%s, %d bundles of %s) was not ready within %g s "
                    "(placement_group_timeout_s); available resources: %s" % (
                        strategy, len(bundles), bundles[0], self.settings.placement_group_timeout_s,
                        ray.available_resources()))
        actor = ray.remote(SlotWorker)
        self.workers = [actor.options(
            num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker, max_concurrency=MAX_CONCURRENCY,
            max_restarts=0, scheduling_strategy=PlacementGroupSchedulingStrategy(
                self.placement_group, placement_group_bundle_index=bundle(i),
                placement_group_capture_child_tasks=False)).remote(i) for i in range(self.num_workers)]

    def _get(self, refs, what):
        import ray
        try:
            return ray.get(refs, timeout=self.settings.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError("tfring.ray: %s took over %g s (timeout_s)" % (what, self.settings.timeout_s)) \
                from None

    def _alive(self):
        """Raises when a worker's actor died or its slot ended early (the SlotJob checks this every second)."""
        import ray
        if self._failed:
            raise RuntimeError(self._failed)
        done, _ = ray.wait(list(self._serving), timeout=0, num_returns=len(self._serving))
        for ref in done:
            index = self._serving.index(ref)
            try:
                outcome = "its slot ended early (mpirun exit code %s)" % ray.get(ref, timeout=5)
            except ray.exceptions.RayActorError as e:
                outcome = "its Ray actor died: %s" % (str(e).strip().splitlines() or [type(e).__name__])[0]
            except Exception as e:  # the slot raised: e.g. the driver was unreachable
                outcome = "its slot failed: %s" % (str(e).strip().splitlines() or [type(e).__name__])[-1]
            self._failed = "tfring.ray: worker %d (%s) failed: %s" % (index, self._describe(index), outcome)
            raise RuntimeError(self._failed)

    def _describe(self, index):
        info = self._slot_infos[index] if index < len(self._slot_infos) else {}
        return "actor pid %s on %s" % (info.get("pid", "?"), info.get("ip", "?"))

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Starts the actors and the ranks (one per actor), and builds executable_cls in every rank.

        Args:
            executable_cls: a class instantiated once in every rank; `execute` passes the instance to its function.
            executable_args: its positional arguments.
            executable_kwargs: its keyword arguments.
            extra_env_vars: variables set in the actors before the ranks start (the ranks inherit them).

        Raises:
            RankError: building the executable failed in a rank (`.rank` names it).
            LaunchError: worker 0 could not start mpirun (e.g. bad nics), reported at once.
            RuntimeError: already started, or a worker died.
            TimeoutError: the placement group or the workers did not start in time.
            ValueError: use_gpu on a cluster without GPUs.
        """
        from tfring.runner.slots.net import route_address
        from tfring.runner.slots import SlotJob
        if self.workers:
            raise RuntimeError("tfring.ray: start() was already called (call shutdown() first)")
        self._failed = None  # a failure of the previous job (shutdown() then start() again) is not this job's
        began = time.monotonic()
        try:
            self._place()
            infos = self._get([w.info.remote() for w in self.workers], "starting %d actors" % self.num_workers)
            self._slot_infos = infos
            if extra_env_vars:
                self._get([w.update_env_vars.remote(dict(extra_env_vars)) for w in self.workers], "setting variables")
            launch_args = ["--network-interfaces", ",".join(sorted(self.settings.nics))] if self.settings.nics else []
            # The driver service listens on this machine's address on the route to worker 0's node only.
            self._job = SlotJob(self.num_workers, route_address(infos[0]["ip"]), launch_args=launch_args).start()
            # Each slot's task service binds the address its own node routes to the driver by (worked out there).
            self._serving = [w.serve.remote(self._job.address, self._job.secret, None) for w in self.workers]
            self._job.wait_ready(self.settings.timeout_s, alive=self._alive)
            gpu_env = {}
            if self.use_gpu:  # every rank of a host sees all that host's GPUs (as Horovod), so CUDA IPC works
                gpus = {}
                for info in infos:
                    gpus.setdefault(info["host"], []).extend(info["gpu_ids"])
                gpu_env = {i: {"CUDA_VISIBLE_DEVICES": ",".join(gpus[info["host"]])} for i, info in enumerate(infos)}
            ranks = self._call(_rank.setup, (gpu_env, executable_cls, list(executable_args or []),
                                             dict(executable_kwargs or {})))
            by_rank = [self._job.slot_of(r) for r in range(self.num_workers)]
            if sorted(by_rank) != list(range(self.num_workers)):
                raise RuntimeError("tfring.ray: the ranks' workers are not one each: %s" % by_rank)
        except BaseException:
            self.shutdown()
            raise
        self.workers = [self.workers[i] for i in by_rank]
        self._serving = [self._serving[i] for i in by_rank]
        self._slot_infos = [infos[i] for i in by_rank]
        self._infos = [dict(infos[i], rank_pid=r["pid"]) for i, r in zip(by_rank, ranks)]
        self._say("%d workers started in %.1f s" % (self.num_workers, time.monotonic() - began))

    # -- calls --

    def _call(self, fn, args=(), kwargs=None):
        if self._job is None:
            raise RuntimeError("tfring.ray: the executor is not started (call start() first)")
        try:
            return self._job.call(fn, args, kwargs, alive=self._alive)
        except RankError:
            raise  # the job goes on (or SlotJob marked it broken: the next call says so at once)
        except LaunchError as e:
            self._failed = str(e)  # mpirun never ran: no actor to blame
            raise
        except RuntimeError as e:
            if self._failed is None:
                try:  # the job's own error (mpirun exited) may hide the cause: a dead actor (Ray tells within ~1 s)
                    deadline = time.monotonic() + 5  # Ray may take seconds to see a killed actor on a busy machine
                    while time.monotonic() < deadline:
                        self._alive()
                        time.sleep(0.5)
                except RuntimeError as dead:
                    raise RuntimeError("%s\n(%s)" % (dead, e)) from None
                self._failed = str(e)
            raise

    def run_remote(self, fn, args=None, kwargs=None):
        """Starts fn(*args, **kwargs) on every worker and returns at once (Horovod's run_remote).

        Calls run in the order they were made: a later run()/execute() waits for the run_remote calls before it.

        Args:
            fn: the function (cloudpickled, as for `run`).
            args: positional arguments.
            kwargs: keyword arguments.

        Returns:
            list: one ray.ObjectRef per worker, in rank order; ray.get gives that rank's return value, or raises
            (a RayTaskError whose message names the rank that raised, with its traceback).

        Raises:
            RuntimeError: the executor is not started.
        """
        if self._job is None:
            raise RuntimeError("tfring.ray: the executor is not started (call start() first)")
        if self._remote is None:
            from tfring.ray._remote import Mailbox
            self._remote = (Mailbox.remote(self.num_workers), concurrent.futures.ThreadPoolExecutor(1),
                            itertools.count(), [])
        mailbox, thread, counter, pending = self._remote
        seq = next(counter)
        refs = [mailbox.get.remote(seq, rank) for rank in range(self.num_workers)]
        call = (fn, tuple(args or ()), dict(kwargs or {}))

        def go():
            try:
                outcome = (True, self._call(*call))
            except BaseException as e:  # the refs raise it; the executor's own state is as after a failed run()
                outcome = (False, "%s: %s" % (type(e).__name__, e))
            mailbox.put.remote(seq, *outcome)
        pending[:] = [f for f in pending if not f.done()] + [thread.submit(go)]
        return refs

    def _after_remote_calls(self):
        if self._remote is not None:
            concurrent.futures.wait(self._remote[3])

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """Runs fn(*args, **kwargs) on every worker, in its rank process (state persists between calls).

        Args:
            fn: the function (cloudpickled: lambdas and closures travel by value).
            args: positional arguments.
            kwargs: keyword arguments.
            callbacks: Horovod's ray_logger callbacks: elastic mode only (min_workers); warned about, not called.

        Returns:
            list: each rank's return value, in rank order.

        Raises:
            RankError: a rank raised (a RuntimeError with `.rank`; the message has its traceback). When another rank
                did not return soon after, the job is broken: later calls fail at once (shutdown() and start again).
            RuntimeError: a worker died, or the job is broken.
        """
        _no_callbacks(callbacks)
        self._after_remote_calls()
        return self._call(fn, tuple(args or ()), dict(kwargs or {}))

    def execute(self, fn, callbacks=None):
        """Runs fn(executable) on every worker, with the object `start` built from executable_cls in that rank.

        Args:
            fn: a function of one argument.
            callbacks: as for `run` (not called).

        Returns:
            list: each rank's return value, in rank order.

        Raises:
            RankError, RuntimeError: as for `run`.
        """
        _no_callbacks(callbacks)
        self._after_remote_calls()
        return self._call(_rank.apply, (fn,))

    def execute_single(self, fn):
        """Runs fn(executable) on the rank 0 worker only.

        Args:
            fn: a function of one argument.

        Returns:
            object: what fn returned on rank 0.

        Raises:
            RankError, RuntimeError: as for `run`.
        """
        self._after_remote_calls()
        return self._call(_rank.apply_single, (fn,))[0]

    def worker_info(self):
        """Each worker's actor and rank process, in rank order (e.g. to watch or kill one).

        Returns:
            list: dicts with "pid" (the actor's), "rank_pid", "hostname", "ip", "node_id" and "gpu_ids".
        """
        return [dict(i) for i in self._infos]

    # -- shutdown --

    def shutdown(self):
        """Stops the ranks, mpirun, the actors and the placement group; waits at most about timeout_s.

        Safe to call more than once, and after a failure.
        """
        import ray
        timeout = self.settings.timeout_s
        remote, self._remote = self._remote, None
        if remote is not None:  # queued calls are dropped; the running one ends with the job below
            remote[1].shutdown(wait=False, cancel_futures=True)
        if self._job is not None:
            # Worker 0 runs mpirun: once its slot has ended no exit report can come, and the actors die below anyway.
            launcher_done = bool(self._serving) and bool(ray.wait(self._serving[:1], timeout=0)[0])
            self._job.stop(timeout=0.5 if launcher_done else min(timeout, 30.0))
            if self._serving:
                ray.wait(list(self._serving), num_returns=len(self._serving), timeout=min(timeout, 15.0))
            self._job.close()
        if remote is not None:  # its thread must not touch the executor's state after the reset below
            concurrent.futures.wait(remote[3], timeout=min(timeout, 30.0))
            ray.kill(remote[0], no_restart=True)
        for worker in self.workers:  # a slot still serving ends with its process: PR_SET_PDEATHSIG stops mpirun
            ray.kill(worker, no_restart=True)
        if self._own_group and self.placement_group is not None:
            ray.util.remove_placement_group(self.placement_group)
        self._wait_gone(timeout)
        self.workers, self.placement_group, self._own_group = [], None, False
        self._job = self._serving = self._failed = None
        self._infos, self._slot_infos = [], []

    def _wait_gone(self, timeout):
        # The rank processes end with the actors (SIGTERM from mpirun, or their slot watchdog); make shutdown() return
        # only once they have, so a new start() does not compete with them. Only this host's pids mean anything here.
        from tfring.runner.slots.net import host_identity
        here = host_identity()
        pids = [p for i in self._infos if i.get("host") == here for p in (i.get("rank_pid"), i.get("pid")) if p]
        deadline = time.monotonic() + min(timeout, 20.0)
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if alive(p)]  # a zombie counts as gone
            time.sleep(0.2)
        if pids:
            self._say("processes still running after shutdown: %s" % pids)


__all__ = ["RayExecutor", "Settings"]
