"""tfringrun's `/end`: ends a rank that stopped responding where no live rank shares its host (a rank alone on its
machine, or a machine whose every rank froze). It reaches the host as mpirun does (ssh, with --ssh-port and
--ssh-identity-file) and kills only a process of this job: one whose environment names the job's private state
directory, so a rank's request cannot end anything else."""
import shlex
import subprocess

from tfring.common import launch_env
from tfring.runner.elastic.hostnames import is_local

TIMEOUT = 30  # seconds for ssh and the remote check


def end_rank(host, pid, state_dir, known_hosts, ssh=()):
    """SIGKILLs process `pid` on `host` if it belongs to this job.

    Args:
        host: the host as the launcher names it (PMIX_HOSTNAME).
        pid: the process id there.
        state_dir: the job's state directory; the process's TFRING_ELASTIC_STATE_DIR must name it.
        known_hosts: callable() -> the host names the job may run on (a request for another is refused).
        ssh: ssh options.

    Returns:
        (bool, str): whether it was ended, and what happened (for the launcher's log and the rank).
    """
    local = is_local(host)
    if not local and host not in set(known_hosts()):
        return False, "refused: %s is not one of the job's hosts" % host
    marker = "%s=%s" % (launch_env.ELASTIC_STATE_DIR, state_dir)
    script = "tr '\\000' '\\n' < /proc/%d/environ | grep -qxF -- %s && kill -KILL %d" % (pid, shlex.quote(marker), pid)
    cmd = ["sh", "-c", script] if local else ["ssh"] + list(ssh) + [host, script]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, "could not reach %s: %s" % (host, e)
    if proc.returncode == 255 and not local:  # ssh's own failure (cut link, host down), not the script's
        return False, "could not reach %s over ssh: %s" % (host, " ".join(proc.stdout.split())[:200])
    if proc.returncode != 0:
        return False, "not ended: no process %d of this job on %s (exit %d) %s" % (
            pid, host, proc.returncode, " ".join(proc.stdout.split())[:200])
    return True, "ended (SIGKILL through %s)" % ("this machine" if local else "ssh")
