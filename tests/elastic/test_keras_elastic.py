"""Elastic jobs on real ranks (tfringrun --min-np/--max-np/--host-discovery-script, ULFM): a SIGKILLed worker
(rank 1 or rank 0) mid-epoch, then a slot added by the discovery script, in one launch per Keras flavour (Keras 3 on
each backend, tf_keras); the job going below --min-np; and mpirun itself dying mid-job (restart from the last
commit). The job
is tests/elastic/keras_job.py (Keras model, KerasState, the elastic callbacks, a commit every batch)."""
import glob
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, kill_session, rank_env

pytestmark = pytest.mark.slow  # launches real ranks or jobs

JOB = os.path.join(ROOT, "tests", "elastic", "keras_job.py")


def launch(tmp_path, args, env=None):
    e = dict(rank_env(), ELASTIC_OUT=str(tmp_path))
    e.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "tfring.runner"] + args + ["python", JOB], cwd=ROOT, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(proc, timeout=300):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        out, _ = proc.communicate()
        pytest.fail("elastic job still running after %d s:\n%s" % (timeout, out[-5000:]))
    return proc.returncode, out


def results(tmp_path):
    finals = [dict(np.load(f)) for f in sorted(glob.glob(str(tmp_path / "final.*.npz")))]
    steps = {}
    for f in glob.glob(str(tmp_path / "steps.*.jsonl")):
        rows = [json.loads(line) for line in open(f)]
        steps[f] = rows
    return finals, steps


def discovery_script(tmp_path, text):
    """(file listing the hosts, executable discovery script printing it): rewrite the file to change hosts."""
    listed = tmp_path / "hosts.txt"
    listed.write_text(text)
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\ncat %s\n" % listed)
    script.chmod(0o755)
    return listed, script


def commits(tmp_path):
    """{pid: [committed step counts, in order]} from keras_job.py's commits.<pid>.jsonl."""
    out = {}
    for f in glob.glob(str(tmp_path / "commits.*.jsonl")):
        out[f.split(".")[-2]] = [json.loads(line)["step"] for line in open(f)]
    return out


def weights(final):
    return [final["arr_%d" % i] for i in range(sum(k.startswith("arr_") for k in final))]


def assert_same_weights(finals):
    first = weights(finals[0])
    for other in finals[1:]:
        for a, b in zip(first, weights(other)):
            np.testing.assert_array_equal(a, b)


def flavour_env(flavour):
    """tf_keras, or Keras 3 on a backend ("keras" is Keras 3 on TensorFlow)."""
    if flavour in ("jax", "torch") and importlib.util.find_spec(flavour) is None:
        pytest.skip("%s is not installed" % flavour)
    return {"TF_USE_LEGACY_KERAS": "1" if flavour == "tf_keras" else "0",
            "KERAS_BACKEND": flavour if flavour in ("jax", "torch") else "tensorflow"}


# One launch per flavour shows both resets: a failure (the victim SIGKILLs itself mid-epoch; the survivors roll
# back to the last commit and go on at 2 ranks, its slot held out), then a growth (rank 0 lists a 4th slot right
# after; a newcomer is spawned into the free one and gets the state). tf_keras grows too: its optimizer has no
# `built`, and a newcomer must build its slots before the first sync as the others did (else the state broadcast
# stalls on the slot variables the newcomer lacks). Each flavour once: the victim is rank 0 (the harder case: the
# state comes from a former rank 1) on Keras 3/TensorFlow and torch, a worker on tf_keras and JAX.
# On JAX Adam's state is sharded (ZeRO stage 1), on torch Nadam's (stage 2): cut for 3, 2 and 3 ranks in turn.
@pytest.mark.parametrize("victim,flavour,sharded", [(0, "keras", 0), (1, "tf_keras", 0), (1, "jax", 1),
                                                    (0, "torch", 2)])
def test_killed_worker_job_goes_on_with_survivors_then_a_new_slot_joins(tmp_path, victim, flavour, sharded):
    kill_at, grow_at = 10, 11  # the second step of the second epoch (8 steps per epoch); the first after it
    hosts, script = discovery_script(tmp_path, "localhost:3\n")
    env = dict(flavour_env(flavour), ELASTIC_KILL="%d:%d" % (victim, kill_at), ELASTIC_STEP_SLEEP="0.25",
               ELASTIC_GROW="%s=localhost:4" % hosts, ELASTIC_GROW_AT=str(grow_at), ELASTIC_SHARDED=str(sharded))
    rc, out = finish(launch(tmp_path, ["-np", "3", "--min-np", "2", "--max-np", "3", "--host-discovery-script",
                                       str(script)], env))
    assert rc == 0, out[-5000:]
    assert "tfring.elastic: reset (failure): 3 -> 2 ranks" in out, out[-5000:]
    assert "tfring.elastic: reset (grow): 2 -> 3 ranks" in out, out[-5000:]
    finals, steps = results(tmp_path)
    killed = json.load(open(tmp_path / "killed.json"))
    assert killed["step"] == kill_at
    assert len(finals) == 3, out[-5000:]  # the victim never finished; the newcomer did
    assert sorted(int(f["rank"]) for f in finals) == [0, 1, 2] and all(int(f["size"]) == 3 for f in finals)
    assert [bool(f["joined"]) for f in sorted(finals, key=lambda f: int(f["rank"]))] == [False, False, True]
    want = {"keras": "tensorflow"}.get(flavour, flavour)
    assert all(str(f["keras"]) == want for f in finals), [str(f["keras"]) for f in finals]
    if flavour == "tf_keras":  # hvd.DistributedOptimizer gave the tf_keras wrapper
        assert all(str(f["optimizer"]) == "LegacyDistributedOptimizer" for f in finals)
    assert_same_weights(finals)
    # Each reset callback lowered the learning rate (two resets): the newcomer got the survivors' from the sync.
    assert all(np.isclose(float(f["learning_rate"]), 0.01 / 3) for f in finals), [f["learning_rate"] for f in finals]
    assert len({int(f["step"]) for f in finals}) == 1 and all(int(f["epoch"]) == 3 for f in finals), finals
    for f in finals:
        if not bool(f["joined"]):
            assert list(f["resets"]) == [2, 3], f
        # Rolled back to the commit of step 10 (a commit per batch); the interrupted epoch 2 runs again in full,
        # and again from the growth's commit: neither Keras 3 nor tf_keras starts an epoch mid-way (tf_keras's fit
        # loop does not read params["steps"] either; UpdateBatchStateCallback only changes what a progress bar shows)
        assert int(f["step"]) > kill_at + 2 * 8, f
    # Every rank (the victim too) committed each step up to the kill, step 8 twice (its batch and the epoch end).
    for pid, committed in commits(tmp_path).items():
        if committed[0] <= kill_at:  # not the newcomer's
            assert [c for c in committed if c <= kill_at] == list(range(1, 9)) + [8, 9, 10], (pid, committed)
    survivors = [rows for rows in steps.values() if not rows[0]["spawned"] and rows[-1]["step"] > kill_at]
    assert len(survivors) == 2
    for rows in survivors:  # 3 ranks up to the kill, 2 from the next step, 3 again; nothing lost, nothing redone
        seq, sizes = [r["step"] for r in rows], [r["size"] for r in rows]
        assert seq == list(range(1, len(seq) + 1)), seq
        assert sizes[:kill_at] == [3] * kill_at and sizes[kill_at] == 2, sizes
        two = sizes.index(3, kill_at)
        assert set(sizes[kill_at:two]) == {2} and set(sizes[two:]) == {3}, sizes
    newcomer = [rows for rows in steps.values() if rows[0]["spawned"]]
    assert len(newcomer) == 1
    seq = [r["step"] for r in newcomer[0]]
    assert seq[0] > grow_at and seq == list(range(seq[0], seq[-1] + 1)), seq  # from the committed step count, not 0
    assert seq[-1] == int(finals[0]["step"]), seq
    if sharded:
        assert_sharded_state_restored(tmp_path)


def assert_sharded_state_restored(tmp_path):
    """Every fit after a reset starts from the whole optimizer state of the commit it resumes (the commit of the
    step it starts at: gathered from the shards of the ranks now, digest for digest), and each rank keeps only its
    part of the two slots (Adam's, Nadam's) of the model's 161 weights at every size (sizes follow the layout)."""
    committed, scalars = {}, {}
    for f in glob.glob(str(tmp_path / "commits.*.jsonl")):
        for row in map(json.loads, open(f)):
            committed.setdefault(row["step"], set()).add(row["optimizer"])
            scalars.setdefault(row["step"], []).append(row["scalars"])
    assert all(len(d) == 1 for d in committed.values()), committed  # every rank committed the same state
    logs = [[json.loads(line) for line in open(f)] for f in glob.glob(str(tmp_path / "sharded.*.jsonl"))]
    survivors = [rows for rows in logs if not rows[0]["spawned"] and len(rows) == 3]
    assert len(survivors) == 2 and sum(rows[0]["spawned"] and len(rows) == 1 for rows in logs) == 1, logs
    at = {}  # the ranks' shards at each fit's start: together Adam's two slots of every weight, once (or padded)
    for row in (row for rows in logs for row in rows):
        at.setdefault((row["step"], row["size"]), []).append(row["slots"])
    for (step, size), slots in at.items():
        assert len(slots) == size and 2 * 161 <= sum(slots) <= 2 * (161 + 4 * size), (step, size, slots)
        assert max(slots) < 2 * 161 * 0.7, (step, size, slots)
    for rows in logs:
        for row in rows[0 if rows[0]["spawned"] else 1:]:  # (a job's first fit starts from no commit)
            assert {row["optimizer"]} == committed[row["step"]], (row, committed.get(row["step"]))
            # The plain values too (iterations, Nadam's u_product), but the learning rate: the reset callback's.
            assert len({tuple(s) for s in scalars[row["step"]]}) == 1, scalars[row["step"]]
            before = 0.01 / (round(0.01 / row["learning_rate"]) - 1)  # (0.01 / (1 + resets)) the commit's
            kept = [s for s in scalars[row["step"]][0] if not np.isclose(s, before)]
            assert sorted(kept + [row["learning_rate"]]) == row["scalars"], (row, scalars[row["step"]])
    assert [row["size"] for row in survivors[0]] == [3, 2, 3]


def test_below_min_np_ends_the_job_with_a_message(tmp_path):
    proc = launch(tmp_path, ["-np", "2", "--min-np", "2", "--elastic-timeout", "3"], {"ELASTIC_KILL": "1:4"})
    rc, out = finish(proc)
    assert rc != 0, out[-5000:]
    assert "fewer than --min-np 2" in out and "no new slots within 3 s" in out, out[-5000:]
    finals, _ = results(tmp_path)
    assert finals == []


def _mpirun_below(pid):
    from tfring.runner.processes import descendants
    for child in descendants(pid):
        try:
            with open("/proc/%d/comm" % child) as f:
                if f.read().strip() in ("mpirun", "prterun"):
                    return child
        except OSError:
            pass
    return None


def test_mpirun_dying_mid_job_restarts_it_from_the_last_commit(tmp_path):
    # Open MPI 5.0.11's prterun sometimes crashes while spawning onto an added host (docs/elastic.md); any death
    # of mpirun by a signal is handled alike: its orphaned ranks are killed and the job starts again from the
    # last commit on disk.
    import signal
    import time
    _, script = discovery_script(tmp_path, "localhost:2\n")  # hosts may be added: commits are kept on disk
    proc = launch(tmp_path, ["-np", "2", "--min-np", "2", "--host-discovery-script", str(script)],
                  {"ELASTIC_STEP_SLEEP": "0.2"})
    deadline = time.time() + 120
    while time.time() < deadline and not any(rows and rows[-1]["step"] >= 5 for rows in results(tmp_path)[1].values()):
        time.sleep(0.1)
    mpirun = _mpirun_below(proc.pid)
    assert mpirun is not None
    crash = time.time()
    os.kill(mpirun, signal.SIGSEGV)
    rc, out = finish(proc)
    assert rc == 0, out[-5000:]
    assert "mpirun died of signal 11: starting the job again on the available hosts from the last commit" in out
    finals, files = results(tmp_path)
    assert len(finals) == 2 and all(int(f["size"]) == 2 for f in finals), out[-5000:]
    assert_same_weights(finals)
    old = [rows for rows in files.values() if rows[0]["t"] < crash]
    restarted = [rows for rows in files.values() if rows[0]["t"] > crash]
    assert len(old) == 2 and len(restarted) == 2, files
    last = max(r["step"] for rows in old for r in rows)
    assert all(r["t"] < crash + 1 for rows in old for r in rows), "an orphaned rank went on after mpirun died"
    for rows in restarted:  # new processes resuming at the last commit (a commit per batch)
        assert last - 1 <= rows[0]["step"] - 1 <= last, (last, rows[0])
        assert [r["step"] for r in rows] == list(range(rows[0]["step"], rows[0]["step"] + len(rows)))
