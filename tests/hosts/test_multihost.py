"""Emulated hosts (network namespaces, tests/hosts/): tfringrun across hosts over TCP, and a cut link ending
the job within 30 s. Needs root and `ip netns`; skipped with the reason otherwise."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, hosts_unavailable, job_summaries, rank_env

pytestmark = pytest.mark.slow  # launches real ranks or jobs

HOSTS_DIR = os.path.join(ROOT, "tests", "hosts")  # the project's own harness: hosts.py and its ssh stand-in
NH = [sys.executable, os.path.join(HOSTS_DIR, "hosts.py")]
# Own namespace names and subnet: no collision with other runs.
NETNS_ENV = {"NETNS_HOSTS_PREFIX": "tfrt%d" % (os.getpid() % 1000),
             "NETNS_HOSTS_SUBNET": "10.232.%d" % (os.getpid() % 200)}


def _nh(*args, check=True, timeout=60):
    env = dict(os.environ, **NETNS_ENV)
    return subprocess.run(NH + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, check=check)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    if os.geteuid() != 0 or not shutil.which("ip"):
        hosts_unavailable("emulated hosts need root and iproute2")
    up = _nh("up", "3", check=False)
    if up.returncode != 0:
        _nh("down", check=False)
        hosts_unavailable("could not create network namespaces: %s" % up.stdout.strip()[-300:])
    fake = tmp_path_factory.mktemp("fakessh")
    os.symlink(os.path.join(HOSTS_DIR, "ssh"), str(fake / "ssh"))  # PRRTE's ssh launcher finds it on PATH
    yield str(fake)
    _nh("down", check=False)


def tfringrun_on_h1(fake_ssh, args, timeout=120, extra_env=None, layout=("2", "h1:1,h2:1")):
    env = dict(rank_env(), **NETNS_ENV)
    env.update(extra_env or {})
    env["PATH"] = fake_ssh + os.pathsep + env["PATH"]
    cmd = NH + ["exec", "h1", sys.executable, "-m", "tfring.runner", "-np", layout[0], "-H", layout[1],
           "--network-interface", NETNS_ENV["NETNS_HOSTS_SUBNET"] + ".0/24"] + args
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_allreduce_across_two_hosts(hosts, tmp_path):
    job = tmp_path / "job.py"
    job.write_text("import socket, tensorflow as tf, tfring as hvd\nhvd.init()\n"
                   "v = hvd.allreduce(tf.constant([hvd.rank() + 1.0]), op=hvd.Sum).numpy()[0]\n"
                   "print('RESULT', socket.gethostname(), hvd.rank(), hvd.cross_size(), v, flush=True)\n")
    proc = tfringrun_on_h1(hosts, ["python", str(job)])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    assert "[0]<stdout>:RESULT h1 0 2 3.0" in out and "[1]<stdout>:RESULT h2 1 2 3.0" in out, out[-3000:]


def test_environment_reaches_the_second_host(hosts, tmp_path):
    """Like a real sshd, this ssh gives the remote side a clean login environment: whatever the ranks on h2 see
    beyond it, tfringrun forwarded (mpirun -x)."""
    clean = tmp_path / "cleanssh"
    clean.mkdir()
    (clean / "ssh").write_text("#!/bin/sh\nexec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=\"$HOME\" "
                               "NETNS_HOSTS_PREFIX=%s %s \"$@\"\n" % (NETNS_ENV["NETNS_HOSTS_PREFIX"],
                                                                      os.path.join(HOSTS_DIR, "ssh")))
    (clean / "ssh").chmod(0o755)
    job = tmp_path / "env.py"
    job.write_text("import os, socket\n"
                   "print('ENV', socket.gethostname(), os.environ.get('MY_VAR'), os.environ.get('PYTHONPATH'),\n"
                   "      os.environ.get('TFRING_CYCLE_TIME'), 'SSH_AUTH_SOCK' in os.environ, flush=True)\n")
    pythonpath = os.environ.get("PYTHONPATH") or ROOT
    proc = tfringrun_on_h1(str(clean), ["--cycle-time-ms", "4", "python", str(job)],
                           extra_env={"MY_VAR": "two words", "PYTHONPATH": pythonpath, "SSH_AUTH_SOCK": "/nope"})
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    assert "[1]<stdout>:ENV h2 two words %s 4.0 False" % pythonpath in out, out[-3000:]


def test_cut_link_ends_the_job_within_30_seconds(hosts, tmp_path):
    job = tmp_path / "loop.py"
    job.write_text("import time, tensorflow as tf, tfring as hvd\nhvd.init()\n"
                   "for i in range(10**6):\n    hvd.allreduce(tf.ones([1000]), name='s')\n"
                   "    if i == 5: print('RUNNING', hvd.rank(), flush=True)\n    time.sleep(0.01)\n")
    proc = tfringrun_on_h1(hosts, ["python", str(job)])
    lines, running = [], 0
    while running < 2:
        line = proc.stdout.readline()
        assert line, "".join(lines)[-3000:]
        lines.append(line)
        running += "RUNNING" in line
    cut = time.time()
    _nh("link", "h2", "down")
    try:
        out, _ = proc.communicate(timeout=60)
        elapsed = time.time() - cut
    finally:
        _nh("link", "h2", "up", check=False)
    assert elapsed < 30, elapsed
    assert proc.returncode != 0
    assert "lost contact with host h2" in out, out[-3000:]
    time.sleep(1)
    assert _nh("pids", "h2", check=False).stdout.strip() == ""  # no orphans on the cut host


@pytest.mark.parametrize("hosts_arg,mpi_args,host_of", [
    ("h1:3,h2:1", "", "0,0,0,1"),  # uneven hosts: reduce to each host's first rank
    ("h1:2,h2:2", "", "0,0,1,1"),  # even hosts: reduce-scatter within hosts, shards across
    ("h1:2,h2:2", "--map-by node", "0,1,0,1"),  # hosts hold non-consecutive ranks: allgather reorders
    ("h1:2,h2:1,h3:1", "", "0,0,1,2"),  # a ring of 3 hosts for the cross-host step of large buffers
])
def test_hierarchical_collectives_equal_flat(hosts, tmp_path, hosts_arg, mpi_args, host_of):
    """tests/hosts/ranks_hierarchical.py on 4 ranks over 2-3 emulated hosts: values equal the flat collectives'
    on every rank, and rank 0's timeline shows the hierarchical path ran."""
    pytest.importorskip("torch", reason="the ranks use tfring.torch (the lightest binding to import)")
    tl = tmp_path / "tl.json"
    proc = tfringrun_on_h1(hosts, ["--hierarchical-allreduce", "--hierarchical-allgather", "--timeline-filename",
                                   str(tl), "--mpi-args", mpi_args, "python", "-m", "pytest", "-q", "-x",
                                   "--color=no", "-p", "no:cacheprovider", "tests/hosts/ranks_hierarchical.py"],
                           extra_env={"HOST_OF": host_of, "TL_PATH": str(tl)}, layout=("4", hosts_arg))
    try:
        out, _ = proc.communicate(timeout=420)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-6000:]
    assert job_summaries(out) == (4, False), out[-6000:]
