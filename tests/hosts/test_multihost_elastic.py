"""Elastic jobs across emulated hosts (network namespaces, tests/hosts/): a host added by the discovery script
gets new ranks (MPI_Comm_spawn onto a host outside mpirun's allocation) and the committed state; when a host's
link is cut the ranks on the launcher's side go on in place at the stall deadline and the cut-off rank ends.
Needs root and `ip netns`; skipped with the reason otherwise."""
import glob
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, rank_env
from tfring.runner.processes import alive
from test_keras_elastic import assert_same_weights, discovery_script, finish, results
from test_multihost import NETNS_ENV, NH, _nh, hosts  # noqa: F401  (the module's emulated hosts fixture)

pytestmark = pytest.mark.slow  # launches real ranks or jobs

JOB = os.path.join(ROOT, "tests", "elastic", "keras_job.py")
TORCH_JOB = os.path.join(ROOT, "tests", "elastic", "torch_job.py")


def elastic_on_h1(fake_ssh, tmp_path, args, env=None, job=JOB):
    e = dict(rank_env(), **NETNS_ENV)
    e.update(ELASTIC_OUT=str(tmp_path), PATH=fake_ssh + os.pathsep + e["PATH"], **(env or {}))
    cmd = NH + ["exec", "h1", sys.executable, "-m", "tfring.runner", "--network-interface",
                NETNS_ENV["NETNS_HOSTS_SUBNET"] + ".0/24"] + args + ["python", job]
    return subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_host_added_by_discovery_gets_ranks_and_state(hosts, tmp_path):  # noqa: F811
    for attempt in (1, 2):
        work = tmp_path / str(attempt)
        work.mkdir()
        listed, script = discovery_script(work, "h1:2\n")
        proc = elastic_on_h1(hosts, work, ["-np", "2", "--max-np", "3", "--host-discovery-script", str(script)],
                             {"ELASTIC_STEP_SLEEP": "0.25", "ELASTIC_GROW": "%s=h1:2\nh2:1" % listed})
        rc, out = finish(proc)
        # prterun also crashed *during* the spawn in about 1 run of 12 (docs/elastic.md); tfringrun then restarts
        # the job (tests/elastic/test_keras_elastic.py covers that path). This test is about the spawn: it tries once
        # more.
        if "mpirun died of signal" not in out:
            break
    tmp_path = work
    # Known Open MPI 5.0.11 defect (docs/elastic.md): after a spawn onto a host added to the allocation, prterun
    # itself often dies in its teardown (SIGABRT or SIGSEGV) once every rank has finished. The ranks report their
    # exits to tfringrun, which then calls the job a success, saying so; the ranks' results are checked in full.
    assert rc == 0, out[-5000:]
    assert "the job failed" not in out, out[-5000:]
    if "mpirun ended with exit code" in out:
        assert "every rank of the final 3 reported success" in out, out[-5000:]
    finals, files = results(tmp_path)
    steps = list(files.values())
    assert len(finals) == 3 and all(int(f["size"]) == 3 for f in finals), out[-5000:]
    assert_same_weights(finals)
    newcomer = [rows for rows in steps if rows[0]["spawned"]]
    assert len(newcomer) == 1 and newcomer[0][0]["step"] > 3, newcomer  # went on from the commit
    assert "tfring.elastic: reset (grow): 2 -> 3 ranks" in out, out[-5000:]
    assert "rank 2 of 3 done" in out, out[-5000:]  # a spawned rank's output is relayed untagged


def test_frozen_rank_alone_on_its_host_is_ended_through_the_launcher(hosts, tmp_path):  # noqa: F811
    torch = pytest.importorskip("torch", reason="torch_job.py trains with tfring.torch")
    # Rank 2, the only rank on h2, stops (SIGSTOP) after step 5. No live rank shares its host, so rank 0 asks
    # tfringrun (/end), which checks over ssh that the process is this job's and kills it; MPI then reports the
    # failure and the ranks on h1 go on as after a kill. Before, the job failed at the deadline.
    proc = elastic_on_h1(hosts, tmp_path, ["-np", "3", "--min-np", "2", "-H", "h1:2,h2:1"],
                         {"ELASTIC_KILL": "2:5", "ELASTIC_SIGNAL": "STOP", "TFRING_STALL_CHECK_TIME_SECONDS": "2",
                          "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "5"}, job=TORCH_JOB)
    rc, out = finish(proc)
    assert rc == 0, out[-5000:]
    assert "rank 2 (host h2), pid" in out and "no live rank shares its host: asking the launcher" in out, out[-5000:]
    assert "ended (SIGKILL through ssh)" in out, out[-5000:]
    assert "tfring.elastic: reset (failure): 3 -> 2 ranks" in out, out[-5000:]
    frozen = json.load(open(tmp_path / "killed.json"))
    finals = [torch.load(f) for f in sorted(glob.glob(str(tmp_path / "final.*.pt")))]
    assert sorted(f["rank"] for f in finals) == [0, 1] and all(f["size"] == 2 for f in finals), out[-3000:]
    for k, v in finals[0]["params"].items():  # identical on the survivors
        assert torch.equal(v, finals[1]["params"][k]), k
    resets = [json.loads(line)["t"] for f in glob.glob(str(tmp_path / "log.*.jsonl")) for line in open(f)
              if json.loads(line)["event"] == "reset"]
    print("recovery (freeze to reset callback): %.2f s" % (min(resets) - frozen["t"]))
    assert min(resets) - frozen["t"] <= 5 + 5  # the stall deadline + 5 s (#45)


def _ended_at(pid):
    """When process `pid` ended (a zombie counts as ended)."""
    while alive(pid):
        time.sleep(0.05)
    return time.time()


def test_cut_link_the_survivors_go_on_in_place_at_the_stall_deadline(hosts, tmp_path):  # noqa: F811
    # h2's link goes down mid-training: its rank is alive but silent. At the deadline the launcher (on h1) confirms
    # the survivors, they declare it failed to MPI and shrink; the cut-off rank cannot reach the launcher and ends.
    _, script = discovery_script(tmp_path, "h1:2\nh2:1\n")
    proc = elastic_on_h1(hosts, tmp_path, ["-np", "3", "--min-np", "2", "--host-discovery-script", str(script)],
                         {"ELASTIC_STEP_SLEEP": "0.15", "TFRING_STALL_CHECK_TIME_SECONDS": "2",
                          "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "5"})
    deadline = time.time() + 120
    while time.time() < deadline and not any(rows and rows[-1]["step"] >= 5 for rows in results(tmp_path)[1].values()):
        time.sleep(0.1)
    cut_off = [int(f.split(".")[-2]) for f, rows in results(tmp_path)[1].items() if rows[0]["rank"] == 2]
    assert len(cut_off) == 1, results(tmp_path)[1]
    ended = []
    threading.Thread(target=lambda: ended.append(_ended_at(cut_off[0])), daemon=True).start()
    cut = time.time()
    _nh("link", "h2", "down")
    try:
        rc, out = finish(proc)
    finally:
        _nh("link", "h2", "up", check=False)
    done = time.time()
    assert rc == 0, out[-5000:]
    # The cut-off rank could not reach the launcher and ended itself, well before tfringrun ended the mpirun that
    # still waited for h2's daemon (5 s after the last exit report).
    assert ended and ended[0] - cut < 15 and ended[0] < done - 4, (ended, cut, done)
    lone = "rank 2 (host h2, pid %d) stopped responding" % cut_off[0]
    assert lone + " and no live rank shares its host: could not reach h2" in out, out[-5000:]  # nor can ssh
    assert lone + ": the others go on without it" in out, out[-5000:]
    assert "declared rank 2 (host h2) failed to MPI" in out, out[-5000:]
    assert "tfring.elastic: reset (failure): 3 -> 2 ranks" in out, out[-5000:]
    assert "starting the job again" not in out, out[-5000:]  # in place: PRRTE never noticed the lost daemon
    finals, files = results(tmp_path)
    assert len(finals) == 2 and all(int(f["size"]) == 2 for f in finals), out[-5000:]
    assert_same_weights(finals)
    steps = list(files.values())
    assert len(steps) == 3, steps  # no new process
    survivors = [rows for rows in steps if any(r["size"] == 2 for r in rows)]  # h1's two processes went on
    assert len(survivors) == 2 and all(rows[-1]["size"] == 2 for rows in survivors), steps
    after = min(r["t"] for rows in survivors for r in rows if r["size"] == 2)
    assert after - cut <= 5 + 5, after - cut  # the stall deadline + 5 s (#45)
    print("link cut to the survivors' first step at np=2: %.1f s; the cut-off rank ended after %.1f s, %.1f s "
          "before the job" % (after - cut, ended[0] - cut, done - ended[0]))
