"""tfring.torch.elastic on real ranks: an np=3 job (tests/elastic/torch_job.py, `tfringrun --min-np 2`) whose rank
0 SIGKILLs itself between two commits goes on at size 2 from the last commit (parameters, Adam state, step
counter and ElasticSampler rolled back; the rest of the epoch re-sharded: every index trained exactly once, and
the final parameters those a single-process replay of the committed schedule gives); TorchState /
ElasticSampler unit checks on one rank (tests/elastic/ranks_torch_elastic_state.py); a slot added by a discovery
script joining mid-epoch (it receives the committed state; the rest of the epoch re-sharded over 3 ranks); the
elastic digits example at np=2."""
import glob
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, free_port, job_summaries, kill_session, rank_env, run_rank_pytest

pytestmark = pytest.mark.slow  # launches real ranks or jobs

torch = pytest.importorskip("torch", reason="torch is not installed: tfring.torch is not built or tested")

JOB = os.path.join(ROOT, "tests", "elastic", "torch_job.py")
REPLAY = os.path.join(ROOT, "tests", "elastic", "torch_replay.py")
ROWS, BATCH, EPOCHS, COMMIT_EVERY = 96, 4, 2, 3  # torch_job.py's


def run_launcher(args, env=None, timeout=240):
    e = dict(rank_env())
    e.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "tfring.runner"] + args, cwd=ROOT, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        out, _ = proc.communicate()
        pytest.fail("job still running after %d s:\n%s" % (timeout, out[-5000:]))
    return proc.returncode, out


def test_state_and_sampler_on_one_rank():
    proc = run_rank_pytest(1, "tests/elastic/ranks_torch_elastic_state.py", timeout=120)
    passed, failed = job_summaries(proc.stdout)
    assert passed and not failed, proc.stdout[-3000:]


def read_logs(out_dir):
    logs = {}
    for name in glob.glob(str(out_dir / "log.*.jsonl")):
        logs[name] = [json.loads(line) for line in open(name)]
    return logs


def replay(init_path, kill_at, out_path):
    """Runs tests/elastic/torch_replay.py in its own process, one that never loaded TensorFlow (torch's optimizer
    step imports torch._dynamo and with it triton where installed, which crashes next to TensorFlow; this pytest
    process blocks triton: tests/conftest.py)."""
    proc = subprocess.run([sys.executable, REPLAY, str(init_path), str(kill_at), str(out_path)], cwd=ROOT,
                          env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return torch.load(out_path)


def assert_each_index_once(logs):
    """Every index of each epoch trained exactly once in the committed history of all ranks (a victim's too):
    nothing lost at a rollback, nothing trained twice after a re-shard; and what each commit kept as the
    sampler's processed indices is the union over ranks of what they logged up to it."""
    entries = [(c["step"], e, i) for rows in logs.values() for c in rows if c["event"] == "commit"
               for e, i in c["indices"]]
    for epoch in range(EPOCHS):
        trained = sorted(i for _, e, i in entries if e == epoch)
        assert trained == list(range(ROWS)), (epoch, len(trained), len(set(trained)))
    for rows in logs.values():
        for c in (r for r in rows if r["event"] == "commit"):
            expected = {i for s, e, i in entries if s <= c["step"] and e == c["epoch"]}
            assert set(c["committed"]) == expected, c["step"]


def test_killed_rank_rolls_back_and_reshards(tmp_path):
    # Rank 0 dies (the harder case: the survivors' new rank 0, which sends the state at sync, was rank 1; a dead
    # rank 1 took 16 s more here and found nothing else) between the commits of steps 3 and 6: steps 4 and 5 are
    # lost and redone at size 2.
    # The metrics endpoint moves with rank 0: the new one serves the reset on the same port.
    # Adam's state is sharded (#46): the victim's part comes back from the commit (the unsharded layout, kept by
    # every rank), and the survivors own every parameter between them again.
    victim, kill_at, token = 0, 5, tmp_path / "token"
    rc, out = run_launcher(["-np", "3", "--min-np", "2", "--metrics-port", str(free_port()), "--metrics-token-file",
                            str(token), "python", JOB],
                           {"ELASTIC_OUT": str(tmp_path), "ELASTIC_KILL": "%d:%d" % (victim, kill_at),
                            "ELASTIC_COMMIT_EVERY": str(COMMIT_EVERY), "ELASTIC_SCRAPE": str(token),
                            "ELASTIC_SHARDED": "1"})
    assert rc == 0, out[-5000:]
    assert "tfring.elastic: reset (failure): 3 -> 2 ranks" in out, out[-5000:]
    assert json.load(open(tmp_path / "scrape.json")) == {
        "tfring_size": 2, "tfring_elastic_resets_total": 1, "tfring_elastic_ranks_lost_total": 1,
        "tfring_elastic_ranks_added_total": 0}
    killed = json.load(open(tmp_path / "killed.json"))
    assert killed["step"] == kill_at
    finals = [torch.load(f) for f in sorted(glob.glob(str(tmp_path / "final.*.pt")))]
    assert sorted(f["rank"] for f in finals) == [0, 1] and all(f["size"] == 2 for f in finals), out[-3000:]
    # 3 committed steps at size 3, then 30 rows per rank (8 batches) for the rest of epoch 0 and 12 for epoch 1.
    expected_steps = 3 + 8 + 12
    for f in finals:
        assert not f["tensorflow"]  # the torch elastic path never imports TensorFlow
        assert f["step"] == expected_steps and f["epoch"] == EPOCHS
        assert {int(s["step"]) for s in f["adam"].values()} == {expected_steps}  # Adam's count rolled back too
    for k, v in finals[0]["params"].items():  # identical on the survivors
        assert torch.equal(v, finals[1]["params"][k]), k
    params, adam = replay(tmp_path / "init.pt", kill_at, tmp_path / "replay.pt")
    assert sys.modules.get("triton") is None  # see replay()
    for k, v in params.items():
        torch.testing.assert_close(finals[0]["params"][k], v, rtol=1e-4, atol=1e-5)
    for i, s in adam.items():
        torch.testing.assert_close(finals[0]["adam"][i]["exp_avg_sq"], s["exp_avg_sq"], rtol=1e-3, atol=1e-7)

    logs = read_logs(tmp_path)
    survivors = [rows for rows in logs.values() if rows[-1]["size"] == 2]
    assert len(survivors) == 2 and len(logs) == 3
    for rows in survivors:
        restores = [r for r in rows if r["event"] == "restore"]
        assert len(restores) == 1 and restores[0]["step"] == 3 and restores[0]["adam"] == [3], restores
        assert restores[0]["equal_to_commit"]
        assert [r["step"] for r in rows if r["event"] == "reset"] == [3]
        commits = [r for r in rows if r["event"] == "commit"]
        assert [c["step"] for c in commits] == [3, 6, 9, 11, 12, 15, 18, 21, 23]
        assert all(c["adam"] == [c["step"]] for c in commits)
    assert_sharded(logs)
    assert_each_index_once(logs)
    reset_at = min(r["t"] for rows in survivors for r in rows if r["event"] == "reset")
    print("recovery (kill to reset callback): %.2f s" % (reset_at - killed["t"]))


def assert_sharded(logs):
    """At every commit each parameter's state is kept by exactly one rank of the size then (4 parameters)."""
    by_commit = {}
    for rows in logs.values():
        for r in rows:
            if r["event"] == "commit":
                by_commit.setdefault((r["size"], r["epoch"], r["step"]), []).append(r["owned"])
    for (size, _, step), parts in by_commit.items():
        if len(parts) == size:  # (a victim's last commit may be all that remains of its size)
            assert sorted(i for part in parts for i in part) == [0, 1, 2, 3] and all(parts), (size, step, parts)


def test_frozen_rank_is_ended_and_the_survivors_go_on(tmp_path):
    # Rank 1 stops (SIGSTOP) after step 5 without dying. The survivors' negotiation names it at the warning time,
    # rank 0 (a live rank on its host) ends it at the shutdown time, and MPI then reports a failure as after a kill.
    rc, out = run_launcher(["-np", "3", "--min-np", "2", "python", JOB],
                           {"ELASTIC_OUT": str(tmp_path), "ELASTIC_KILL": "1:5", "ELASTIC_SIGNAL": "STOP",
                            "ELASTIC_COMMIT_EVERY": str(COMMIT_EVERY), "TFRING_STALL_CHECK_TIME_SECONDS": "2",
                            "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "5"})
    assert rc == 0, out[-5000:]
    assert "stopped responding" in out and "the elastic job goes on without it" in out, out[-5000:]
    assert "tfring.elastic: reset (failure): 3 -> 2 ranks" in out, out[-5000:]
    frozen = json.load(open(tmp_path / "killed.json"))
    finals = [torch.load(f) for f in sorted(glob.glob(str(tmp_path / "final.*.pt")))]
    assert sorted(f["rank"] for f in finals) == [0, 1] and all(f["size"] == 2 for f in finals), out[-3000:]
    assert all(f["step"] == 3 + 8 + 12 and f["epoch"] == EPOCHS for f in finals)  # as after a kill at step 5
    for k, v in finals[0]["params"].items():  # identical on the survivors
        assert torch.equal(v, finals[1]["params"][k]), k
    logs = read_logs(tmp_path)
    reset_at = min(r["t"] for rows in logs.values() for r in rows if r["event"] == "reset")
    print("recovery (freeze to reset callback): %.2f s" % (reset_at - frozen["t"]))
    assert reset_at - frozen["t"] <= 5 + 5  # the stall deadline + 5 s (#45)


def test_rank_frozen_inside_a_transfer_is_ended_and_the_survivors_go_on():
    # Rank 2 stops 0.3 s into a 384 MiB allreduce (tests/monitor/frozen_job.py): the survivors are blocked in MPI.
    # Their watch thread names it, rank 0 ends it at the shutdown time, MPI fails the transfer as after a kill,
    # and the survivors redo the allreduce at np=2.
    rc, out = run_launcher(["-np", "3", "--min-np", "2", "python", os.path.join(ROOT, "tests", "monitor",
                                                                              "frozen_job.py"), "2", "data"],
                           {"TFRING_STALL_CHECK_TIME_SECONDS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "3"})
    assert rc == 0, out[-5000:]
    assert "stopped responding: the data transfer of allreduce 'allreduce.big'" in out, out[-5000:]
    assert "ending rank 2 (host " in out and "tfring.elastic: reset (failure): 3 -> 2 ranks" in out, out[-5000:]
    done = sorted(line.split("DONE ", 1)[1].split()[:3] for line in out.splitlines() if "DONE " in line)
    assert done == [["0", "2", "2.0"], ["1", "2", "2.0"]], out[-5000:]


def test_survivor_whose_failed_transfer_never_returns_is_ended_by_its_backstop():
    # Issue #45's last hang (1 run in 90 on emulated hosts): a survivor whose MPI call came back neither on its peer's
    # death nor on the revoke. Simulated on rank 1 (TFRING_TEST_HOLD_FAILED_TRANSFER: its failed transfer never
    # returns): its watch abandons the transfer, and max(5 s, the shutdown time) later the process ends itself, so
    # nobody waits for it forever (before, every rank waited forever). Rank 0, waiting for it in ULFM's shrink, does
    # not survive that here: Open MPI 5.0.11 exits it with -1 when the awaited peer dies mid-agreement, and mpirun
    # under ULFM then exits 0; the ranks' start and exit reports tell tfringrun that the job did not finish.
    start = time.time()
    rc, out = run_launcher(["-np", "3", "--min-np", "1", "python", os.path.join(ROOT, "tests", "monitor",
                                                                              "frozen_job.py"), "2", "data"],
                           {"TFRING_STALL_CHECK_TIME_SECONDS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "3",
                            "TFRING_TEST_HOLD_FAILED_TRANSFER": "1"}, timeout=120)
    assert "[tfring ERROR rank 1] the data transfer of allreduce 'allreduce.big' has not returned 5 s after this " \
           "rank abandoned it" in out, out[-5000:]
    done = sorted(line.split("DONE ", 1)[1].split()[:3] for line in out.splitlines() if "DONE " in line)
    if done:  # rank 0 survived the shrink after all: it went on alone
        assert rc == 0 and done == [["0", "1", "1.0"]], out[-5000:]
    else:
        assert rc != 0 and "the job did not finish" in out, (rc, out[-5000:])
    print("freeze to the launcher's exit: %.1f s" % (time.time() - start))


def test_reset_limit_ends_the_job(tmp_path):
    # --reset-limit 0: the first failure is one reset too many, so the survivors end the job instead of going on.
    rc, out = run_launcher(["-np", "3", "--min-np", "2", "--reset-limit", "0", "python", JOB],
                           {"ELASTIC_OUT": str(tmp_path), "ELASTIC_KILL": "1:5",
                            "ELASTIC_COMMIT_EVERY": str(COMMIT_EVERY)})
    assert rc != 0, out[-5000:]
    assert "the job was reset 1 times (--reset-limit 0); ending it" in out, out[-5000:]
    assert not glob.glob(str(tmp_path / "final.*.pt")), out[-3000:]  # nobody trained on


def test_slot_added_by_discovery_gets_state_and_its_shard(tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("localhost:2\n")
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\ncat %s\n" % hosts)
    script.chmod(0o755)
    token = tmp_path / "token"
    rc, out = run_launcher(["-np", "2", "--max-np", "3", "--host-discovery-script", str(script), "--metrics-port",
                            str(free_port()), "--metrics-token-file", str(token), "python", JOB],
                           {"ELASTIC_OUT": str(tmp_path), "ELASTIC_GROW": "%s=localhost:3" % hosts,
                            "ELASTIC_STEP_SLEEP": "0.25", "ELASTIC_SCRAPE": str(token), "ELASTIC_SHARDED": "2"})
    assert rc == 0, out[-5000:]
    assert "tfring.elastic: reset (grow): 2 -> 3 ranks" in out, out[-5000:]
    assert json.load(open(tmp_path / "scrape.json")) == {
        "tfring_size": 3, "tfring_elastic_resets_total": 1, "tfring_elastic_ranks_lost_total": 0,
        "tfring_elastic_ranks_added_total": 1}
    finals = [torch.load(f) for f in sorted(glob.glob(str(tmp_path / "final.*.pt")))]
    assert sorted(f["rank"] for f in finals) == [0, 1, 2] and all(f["size"] == 3 for f in finals), out[-3000:]
    for f in finals[1:]:
        for k, v in f["params"].items():
            assert torch.equal(v, finals[0]["params"][k]), k
    assert len({f["step"] for f in finals}) == 1
    for f in finals:
        assert {int(s["step"]) for s in f["adam"].values()} == {f["step"]}
    logs = read_logs(tmp_path)
    newcomer = [rows for rows in logs.values() if rows[0]["spawned"]]
    assert len(newcomer) == 1 and len(logs) == 3
    first = [r for r in newcomer[0] if r["event"] == "commit"][0]
    assert first["step"] > 3 and first["adam"] == [first["step"]]  # it started from the committed state
    for rows in logs.values():  # no rollback on a growth
        assert not [r for r in rows if r["event"] == "restore"]
    assert_sharded(logs)  # (sharded: the newcomer's part came from the ranks that held it)
    # ZeRO stage 2: after each step a rank holds the gradients of the parameters it owns, at every size.
    commits = [r for rows in logs.values() for r in rows if r["event"] == "commit"]
    assert all(set(r["grads"]) <= set(r["owned"]) for r in commits), commits
    assert {r["size"] for r in commits if r["grads"] and r["grads"] == r["owned"]} == {2, 3}, commits
    assert_each_index_once(logs)


def test_elastic_digits_example():
    rc, out = run_launcher(["-np", "2", "--min-np", "1", "--max-np", "2", "python",
                            os.path.join(ROOT, "examples", "torch_elastic_digits.py"), "--epochs", "3",
                            "--target-accuracy", "0.9"], timeout=240)
    assert rc == 0, out[-5000:]
    assert "validation accuracy" in out and "on 2 ranks" in out, out[-3000:]


def test_every_rank_killed_together_restarts_the_job_from_the_last_commit(tmp_path):
    # Every rank gone at once without a failure of its own (killed together here; crashed inside Open MPI in the
    # wild): no rank reported its status, and the job had committed, so tfringrun starts it again from the last
    # commit on disk (a discovery script: commits are kept there). Before, mpirun under ULFM exited 0 (a killed
    # process counts as a success there) and so did tfringrun: a job that never finished "succeeded".
    import signal
    import time
    discover = tmp_path / "discover.sh"
    discover.write_text("#!/bin/sh\necho localhost:2\n")
    discover.chmod(0o755)
    env = dict(rank_env(), ELASTIC_OUT=str(tmp_path), ELASTIC_STEP_SLEEP="0.3")  # 24 steps: ~7 s
    proc = subprocess.Popen([sys.executable, "-m", "tfring.runner", "-np", "2", "--min-np", "2",
                             "--host-discovery-script", str(discover), "python", JOB], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not any(r.get("event") == "commit" and r["step"] >= 6
                                                  for rows in read_logs(tmp_path).values() for r in rows):
            time.sleep(0.05)
        from tfring.runner.processes import descendants
        ranks = [p for p in descendants(proc.pid) if open("/proc/%d/comm" % p).read().startswith("python")
                 and "torch_job.py" in open("/proc/%d/cmdline" % p).read()]
        assert len(ranks) == 2, ranks
        killed = time.time()
        for pid in ranks:
            os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=240)
    finally:
        kill_session(proc.pid)
    assert proc.returncode == 0, out[-5000:]
    assert "every rank ended without reporting its status (mpirun exited with code" in out, out[-5000:]
    assert "starting the job again on the available hosts from the last commit" in out, out[-5000:]
    commits = [r["step"] for rows in read_logs(tmp_path).values() for r in rows
               if r.get("event") == "commit" and r["t"] < killed]
    finals = [torch.load(f) for f in sorted(glob.glob(str(tmp_path / "final.*.pt")))]
    assert len(finals) == 2 and all(f["size"] == 2 for f in finals), out[-3000:]
    assert not {int(os.path.basename(f).split(".")[1]) for f in glob.glob(str(tmp_path / "final.*.pt"))} & set(ranks)
    for k, v in finals[0]["params"].items():  # identical on both new processes
        assert torch.equal(v, finals[1]["params"][k]), k
    resumed = [rows[0]["step"] for rows in read_logs(tmp_path).values() if rows and rows[0]["t"] > killed
               and "step" in rows[0]]
    assert resumed and all(s >= max(commits) - COMMIT_EVERY for s in resumed), (resumed, max(commits))
