"""The Ray actor behind each RayExecutor worker: a slot of a tfring.runner slot job. Its `serve` method runs
tfring.runner.slots.task.serve_slot for the job's whole life in one of the actor's threads, so mpirun (slot 0) and
the PRRTE daemons (first slot of each other host) are children of the actor and get SIGTERM when it dies
(PR_SET_PDEATHSIG, set by the slot launcher); `info` stays callable meanwhile (a threaded actor)."""
import os
import socket

MAX_CONCURRENCY = 4  # serve + info/update_env_vars calls


class SlotWorker:
    """One worker of a RayExecutor (used as a Ray actor class: `ray.remote(SlotWorker)`).

    Args:
        index: the worker's index (its slot in the job).
    """

    def __init__(self, index):
        self.index = index

    def info(self):
        """What the driver needs to know about this actor.

        Returns:
            dict: "pid", "hostname", "host" (the slot launcher's host identity), "ip" (the Ray node's address),
            "node_id" and "gpu_ids" (Ray's GPU ids for this actor).
        """
        import ray
        from tfring.runner.slots.net import host_identity
        context = ray.get_runtime_context()
        return {"pid": os.getpid(), "hostname": socket.gethostname(), "host": host_identity(),
                "ip": ray.util.get_node_ip_address(), "node_id": context.get_node_id(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    def update_env_vars(self, env):
        """Sets environment variables in the actor's process (mpirun, started here, passes them to the ranks).

        Args:
            env: {name: value}.
        """
        os.environ.update({str(k): str(v) for k, v in env.items()})

    def serve(self, driver, secret, bind_host):
        """Serves this worker's slot until the driver stops the job (blocks one of the actor's threads).

        Args:
            driver: the slot driver's "host:port".
            secret: the job's secret: an argument of this call, never in the environment or on a command line of
                the actor (mpirun gets it by name in its own environment).
            bind_host: the address of this slot's task service.

        Returns:
            int: mpirun's exit code on worker 0 (None when it never ran), None on the others.
        """
        from tfring.runner.slots.task import serve_slot
        return serve_slot(driver, secret, self.index, bind_host=bind_host)
