"""Committed state on disk, for the one failure ULFM cannot survive: a lost host. Open MPI's runtime (PRRTE)
ends the whole job when it loses a host's daemon (measured, docs/elastic.md), so the launcher starts the job
again on the remaining hosts and rank 0 resumes from the last commit it finds here.

Only jobs that span hosts, or may come to (a --host-discovery-script), write it, one file per host (its local
rank 0). It is also read after mpirun itself died (Open MPI 5.0.11's prterun can crash while spawning onto an added
host): a single-host job without a discovery script then starts again from its beginning. Each file is
written next to the old one and renamed over it, so a reader never sees half a file. The directory is the
launcher's private one (mode 0700, $TFRING_ELASTIC_STATE_DIR); the files are cloudpickle'd State snapshots
written by this job only."""
import glob
import os

from tfring.common import launch_env, topology
from tfring.common.elastic.membership import host_name

_restored = False


def directory():
    return os.environ.get(launch_env.ELASTIC_STATE_DIR) or None


def save(snapshot, commit):
    """Writes `snapshot` (a picklable dict) as commit number `commit` if this rank is its host's first and the
    job spans hosts or has a discovery script."""
    import cloudpickle

    path = directory()
    spans = topology.cross_size() >= 2 or os.environ.get(launch_env.ELASTIC_DISCOVERY) == "1"
    if path is None or not spans or topology.local_rank() != 0:
        return
    os.makedirs(path, mode=0o700, exist_ok=True)  # on another host than the launcher's it may not exist yet
    name = os.path.join(path, "state.%s" % _host_tag())
    with open(name + ".tmp", "wb") as f:
        cloudpickle.dump({"commit": commit, "snapshot": snapshot}, f)
    os.replace(name + ".tmp", name + ".pkl")


def _host_tag():
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in host_name())


def load_once():
    """On the first call in a job the launcher restarted after losing a host: (commit, snapshot) of the newest
    file, else None."""
    global _restored
    if _restored or os.environ.get(launch_env.ELASTIC_RESTART) != "1" or directory() is None:
        return None
    _restored = True
    import cloudpickle
    newest = None
    for name in glob.glob(os.path.join(directory(), "state.*.pkl")):
        with open(name, "rb") as f:
            data = cloudpickle.load(f)
        if newest is None or data["commit"] > newest["commit"]:
            newest = data
    return (newest["commit"], newest["snapshot"]) if newest else None
