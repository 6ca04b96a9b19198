"""tfring.ray.ElasticRayExecutor: Horovod's elastic Ray API on tfring's elastic slot job
(tfring.runner.slots.elastic_job).

A discovery (RayHostDiscovery by default: every alive node's CPUs, or GPUs, per slot) says how many slots each
host offers; the executor keeps one actor per slot (pinned to the host by Ray's `node:<address>` resource), so
an actor that dies (killed, its node lost) is replaced while the discovery still offers its slot, a host that
gains slots gets actors, and a host the discovery drops loses its actors. The job (mpirun in this process, ULFM)
shrinks when an actor dies — rank 0's included, in well under a second, survivors rolling back to the last commit
— and rank 0 spawns a rank onto each new actor at the next commit."""
import dataclasses
import math
import os
import random
import sys
import threading
import time

from tfring.ray.worker import MAX_CONCURRENCY, SlotWorker
from tfring.runner.slots.elastic_calls import renamed_sizes

SYNC_PERIOD = 1.0  # seconds between two looks at the discovery and the actors


@dataclasses.dataclass
class ElasticSettings:
    """What ElasticRayExecutor.create_settings returns (Horovod's ElasticSettings fields that tfring uses)."""
    discovery: object = None
    min_num_proc: int = 1
    max_num_proc: int = None
    num_proc: int = 1
    elastic_timeout: float = 600
    reset_limit: int = None
    timeout_s: float = 30
    nics: set = None
    verbose: int = 1
    ssh_identity_file: str = None


class RayHostDiscovery:
    """Slots from Ray's cluster state: each alive node offers CPU // cpus_per_slot slots (with use_gpu, at most
    GPU // gpus_per_slot), keyed by the node's address (Horovod's RayHostDiscovery)."""

    def __init__(self, use_gpu=False, cpus_per_slot=1, gpus_per_slot=1):
        self.use_gpu, self.cpus_per_slot, self.gpus_per_slot = use_gpu, cpus_per_slot, gpus_per_slot

    def find_available_hosts_and_slots(self):
        """Returns: dict {host address: slots}."""
        import ray
        hosts = {}
        for node in ray.nodes():
            if not node.get("Alive", node.get("alive")):
                continue
            resources = node.get("Resources", {})
            slots = resources.get("CPU", 0) // self.cpus_per_slot
            if self.use_gpu:
                slots = min(slots, resources.get("GPU", 0) // self.gpus_per_slot)
            if slots >= 1:
                address = node["NodeManagerAddress"]
                hosts[address] = hosts.get(address, 0) + int(math.floor(slots))
        return hosts


class TestDiscovery(RayHostDiscovery):
    """Horovod's test discovery: every change_frequency_s it hides one more discovered host or brings a hidden one
    back (at random, keeping between min_hosts and max_hosts), so a job is shrunk and grown without touching the
    cluster. A hidden host's actors are killed (with or without `_graceful`: tfring has no graceful removal)."""
    __test__ = False  # not a pytest class

    def __init__(self, min_hosts, max_hosts, change_frequency_s, use_gpu=False, cpus_per_slot=1, gpus_per_slot=1,
                 verbose=True, _graceful=True):
        super().__init__(use_gpu, cpus_per_slot, gpus_per_slot)
        self.min_hosts, self.max_hosts, self.change_frequency_s = min_hosts, max_hosts, change_frequency_s
        self.verbose, self.graceful = verbose, _graceful
        self._hidden, self._last = set(), None

    def _change(self, hosts):
        self._hidden &= set(hosts)
        shown = [h for h in hosts if h not in self._hidden]
        grow = len(shown) <= self.min_hosts or (len(shown) < self.max_hosts and random.random() < 0.5)
        if grow and self._hidden:
            self._hidden.discard(random.choice(sorted(self._hidden)))
        elif not grow and shown:
            self._hidden.add(random.choice(shown))

    def find_available_hosts_and_slots(self):
        hosts = super().find_available_hosts_and_slots()
        now = time.monotonic()
        if self._last is None:
            self._last = now
        elif now - self._last >= self.change_frequency_s:
            self._change(hosts)
            self._last = now
        shown = {h: n for h, n in hosts.items() if h not in self._hidden}
        if self.verbose:
            print("tfring.ray.TestDiscovery: %d of %d hosts: %s" % (len(shown), len(hosts), shown), flush=True)
        return shown


class _Actors:
    """The actors of one run: one per discovered slot (up to max_num_proc), each serving a slot of the job."""

    def __init__(self, executor, job):
        self.executor, self.job = executor, job
        self.actors = {}  # index -> {"host", "actor", "serving"}
        self.next_index = 0
        self.stop = threading.Event()

    def _create(self, host):
        import ray
        ex = self.executor
        actor = ray.remote(SlotWorker).options(
            num_cpus=ex.cpus_per_slot, num_gpus=ex.gpus_per_slot if ex.use_gpu else 0, max_restarts=0,
            max_concurrency=MAX_CONCURRENCY, resources={"node:%s" % host: 0.01}).remote(self.next_index)
        if ex.env_vars:  # before serve: a threaded actor runs calls in any order
            ray.get(actor.update_env_vars.remote(dict(ex.env_vars)), timeout=ex.settings.timeout_s)
        self.actors[self.next_index] = {"host": host, "actor": actor,
                                        "serving": actor.serve.remote(self.job.address, self.job.secret, None)}
        self.next_index += 1

    def sync(self):
        import ray
        hosts = self.executor.settings.discovery.find_available_hosts_and_slots()
        refs = {entry["serving"]: index for index, entry in self.actors.items()}
        if refs:
            done, _ = ray.wait(list(refs), timeout=0, num_returns=len(refs))
            for ref in done:
                index = refs[ref]
                ray.kill(self.actors.pop(index)["actor"])  # its slot ended: the actor must not linger
                self.executor._say("worker %d ended (its actor died or its slot stopped)" % index)
        by_host = {}
        for index, entry in sorted(self.actors.items()):
            by_host.setdefault(entry["host"], []).append(index)
        for host, indexes in by_host.items():  # a host dropped by the discovery, or with fewer slots
            for index in indexes[hosts.get(host, 0):]:
                self.executor._say("host %s no longer offers worker %d's slot: killing its actor" % (host, index))
                ray.kill(self.actors.pop(index)["actor"])
        cap = self.executor.settings.max_num_proc
        for host, slots in sorted(hosts.items()):
            while sum(e["host"] == host for e in self.actors.values()) < slots and (
                    cap is None or len(self.actors) < cap):
                self._create(host)

    def run(self):
        while not self.stop.wait(SYNC_PERIOD):
            try:
                self.sync()
            except Exception as e:  # noqa: BLE001 - a failing discovery: keep the actors there are, say why
                self.executor._say("discovery failed: %s: %s" % (type(e).__name__, e))

    def close(self):
        import ray
        self.stop.set()
        for entry in self.actors.values():
            ray.kill(entry["actor"])
        self.actors.clear()


class ElasticRayExecutor:
    """Runs an elastic tfring job on Ray actors, one per slot the discovery offers (Horovod's ElasticRayExecutor).

    Args:
        settings: from `create_settings`.
        use_gpu: reserve GPUs for each slot's actor.
        cpus_per_slot: Ray CPUs per actor.
        gpus_per_slot: Ray GPUs per actor (with use_gpu; default 1).
        env_vars: variables set in the actors (the ranks inherit the driver's environment plus these).
        override_discovery: replace settings.discovery by a RayHostDiscovery of these resources.

    Raises:
        ValueError: gpus_per_slot without use_gpu, or a non-positive value.
    """

    @staticmethod
    def create_settings(min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600, timeout_s=30,
                        ssh_identity_file=None, nics=None, min_np=None, max_np=None, verbose=1, **kwargs):
        """Horovod's settings for an elastic Ray job.

        Args:
            min_num_proc: fewest ranks the job goes on with (and starts with).
            max_num_proc: most ranks (None: as many slots as the discovery offers).
            reset_limit: most resets before the job fails (None: no limit).
            elastic_timeout: seconds a reset may take, and the wait for slots below min_num_proc.
            timeout_s: seconds for min_num_proc actors to start and register.
            ssh_identity_file: accepted and unused (no ssh: the actors start the ranks).
            nics: network interfaces (names or CIDR subnets) for tfring's traffic between hosts.
            min_np: deprecated name of min_num_proc.
            max_np: deprecated name of max_num_proc.
            verbose: 0 keeps tfring.ray's own messages quiet.
            **kwargs: other Horovod ElasticSettings fields, accepted and unused.

        Returns:
            ElasticSettings: the settings (set `.discovery` to use your own discovery with override_discovery=False).

        Raises:
            ValueError: min_num_proc is not a positive integer, or max_num_proc is below it.
        """
        min_num_proc, max_num_proc = renamed_sizes(min_num_proc, max_num_proc, min_np, max_np, stacklevel=2)
        if not isinstance(min_num_proc, int) or isinstance(min_num_proc, bool) or min_num_proc < 1:
            raise ValueError("tfring.ray: min_num_proc: expected a positive integer, got %r" % (min_num_proc,))
        if max_num_proc is not None and (not isinstance(max_num_proc, int) or max_num_proc < min_num_proc):
            raise ValueError("tfring.ray: max_num_proc=%r: expected an integer >= min_num_proc (%d)" % (
                max_num_proc, min_num_proc))
        if isinstance(nics, str):
            nics = set(nics.split(","))
        return ElasticSettings(min_num_proc=min_num_proc, max_num_proc=max_num_proc, num_proc=min_num_proc,
                               elastic_timeout=elastic_timeout, reset_limit=reset_limit, timeout_s=timeout_s,
                               nics=set(nics) if nics else None, verbose=verbose, ssh_identity_file=ssh_identity_file)

    def __init__(self, settings, use_gpu=False, cpus_per_slot=1, gpus_per_slot=None, env_vars=None,
                 override_discovery=True):
        if gpus_per_slot and not use_gpu:
            raise ValueError("tfring.ray: gpus_per_slot is set but use_gpu is False")
        gpus_per_slot = gpus_per_slot or int(bool(use_gpu))
        if use_gpu and gpus_per_slot < 1:
            raise ValueError("tfring.ray: gpus_per_slot: expected >= 1, got %r" % (gpus_per_slot,))
        if not cpus_per_slot or cpus_per_slot <= 0:
            raise ValueError("tfring.ray: cpus_per_slot: expected a positive number, got %r" % (cpus_per_slot,))
        if override_discovery or settings.discovery is None:
            settings.discovery = RayHostDiscovery(use_gpu, cpus_per_slot, gpus_per_slot)
        self.settings, self.use_gpu = settings, bool(use_gpu)
        self.cpus_per_slot, self.gpus_per_slot, self.env_vars = cpus_per_slot, gpus_per_slot, dict(env_vars or {})
        self._started = False
        self.job = None  # the running job (tests read its books)

    def _say(self, message):
        if self.settings.verbose:
            sys.stderr.write("tfring.ray: %s\n" % message)
            sys.stderr.flush()

    def start(self):
        """Checks that Ray runs and that the discovery answers (the actors start with each `run`).

        Raises:
            RuntimeError: Ray is not initialized.
        """
        import ray
        if not ray.is_initialized():
            raise RuntimeError("tfring.ray: ElasticRayExecutor.start(): call ray.init() first")
        hosts = self.settings.discovery.find_available_hosts_and_slots()
        self._say("discovery offers %d slots on %d hosts" % (sum(hosts.values()), len(hosts)))
        self._started = True

    def run(self, worker_fn, callbacks=None):
        """Runs worker_fn() (an elastic function: it calls tfring.init() and its elastic.run function) on one rank
        per slot until it returns on the ranks left.

        Args:
            worker_fn: a function of no arguments.
            callbacks: callables each given every dict a rank sends with `tfring.ray.ray_logger.log`.

        Returns:
            list: the return value of each rank that finished, in final rank order.

        Raises:
            RuntimeError: start() was not called; mpirun ended early.
            RankError: a rank raised an error that is not a lost peer.
            TimeoutError: fewer than min_num_proc slots within timeout_s.
        """
        import ray
        from tfring.runner.slots.elastic_job import ElasticSlotJob
        from tfring.runner.slots.net import route_address
        if not self._started:
            raise RuntimeError("tfring.ray: call start() before run()")
        callbacks = list(callbacks or [])

        def report(info):
            for callback in callbacks:
                callback(info)
        s = self.settings
        launch_args = ["--network-interfaces", ",".join(sorted(s.nics))] if s.nics else []
        # The ranks run under mpirun in this process (and the daemons of other nodes' first actors): env_vars go
        # to the ranks through mpirun, as well as into the actors.
        job = ElasticSlotJob(s.num_proc, s.min_num_proc, s.max_num_proc, route_address(ray.util.get_node_ip_address()),
                             env=dict(os.environ, **{str(k): str(v) for k, v in self.env_vars.items()}),
                             launch_args=launch_args, elastic_timeout=s.elastic_timeout, reset_limit=s.reset_limit,
                             who="tfring.ray", on_report=report)
        self.job = job
        actors = _Actors(self, job)
        thread = threading.Thread(target=actors.run, name="tfring-ray-elastic-actors", daemon=True)
        try:
            job.start()
            actors.sync()
            thread.start()
            job.wait_ready(s.timeout_s, want=lambda: len(actors.actors), settle=min(s.timeout_s, 30))
            return job.call(worker_fn)
        finally:
            actors.stop.set()  # first: the actors' slots end with the job, which is not a loss to report
            if thread.is_alive():
                thread.join(30)  # a sync in progress ends (its actors are then in the books, killed below)
            job.stop(10)
            actors.close()
            job.close()
