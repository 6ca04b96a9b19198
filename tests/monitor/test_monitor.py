"""The monitor on real ranks, through its own launches: tfringrun --metrics-file writes every rank's numbers (and
--metrics-port serves them to a Prometheus scrape, checked against hvd.metrics()); a stall
report names the Keras layer's variable behind a waiting gradient (every Keras backend) and what the missing rank
waits on. (A rank slowed by a sleep is named within 20 steps at np=2 and 3, and a clean run names nobody, in the
bindings' shared launches: tests/tf/ranks_monitor.py, tests/pt/ranks_torch_monitor.py,
tests/jx/ranks_jax_monitor.py, on the loop in straggler_job.py.)"""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, free_port, rank_env, run_ranks

JOB = os.path.join(ROOT, "tests", "monitor", "straggler_job.py")
STALL = os.path.join(ROOT, "tests", "monitor", "stall_job.py")


@pytest.mark.slow
def test_tfringrun_metrics_file_has_every_ranks_numbers(tmp_path):
    path, token = tmp_path / "metrics.jsonl", tmp_path / "private" / "token"
    env = dict(rank_env(), TFRING_MONITOR_INTERVAL_SECONDS="0.2")
    # The same job serves Prometheus (--metrics-port): tfringrun writes the token file (0600) and passes the token
    # to the ranks by name; rank 0 scrapes itself with it and checks the values against hvd.metrics().
    proc = subprocess.run([sys.executable, "-m", "tfring.runner", "-np", "2", "--metrics-file", str(path),
                           "--metrics-port", str(free_port()), "--metrics-token-file", str(token), "--verbose",
                           sys.executable, JOB, "--slow-rank", "1", "--steps", "40", "--mark", "--scrape", str(token)],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert os.stat(token).st_mode & 0o777 == 0o600 and len(token.read_text().strip()) >= 16
    assert token.read_text().strip() not in proc.stdout and "-x TFRING_METRICS_TOKEN" in proc.stdout
    assert re.search(r"SCRAPE \d+", proc.stdout) and "metrics for Prometheus at http://127.0.0.1:" in proc.stdout
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) >= 3, lines
    assert all(lines[i]["round"] < lines[i + 1]["round"] for i in range(len(lines) - 1)), lines
    last = lines[-1]
    assert last["size"] == 2 and [r["rank"] for r in last["ranks"]] == [0, 1]
    # Marked steps, counted exactly (the first step's collectives, seen before its mark, are not counted twice)
    assert last["total_steps"] == 40
    for r in last["ranks"]:
        t = r["total"]
        # 4 gradients (64x32 kernel ...) a step, fused into one or more MPI calls
        assert t["collectives"] >= 40 and t["bytes_reduced"] >= 40 * 4 * (32 * 64 + 64 + 64 * 10 + 10) and \
            t["busbw_gbps"] > 0, r
    assert last["ranks"][0]["total"]["wait_s"] > 40 * 0.04 > last["ranks"][1]["total"]["wait_s"], last
    assert any(line["straggler"] and line["straggler"]["rank"] == 1 for line in lines), lines


@pytest.mark.slow
# Each backend once (the layer names are the backend's); both cases of the missing rank (it waits on a collective of
# its own, or it is busy outside tfring) come from the framework-free stall inspector, so each is run on some backend.
@pytest.mark.parametrize("backend,other", [("tensorflow", True), ("jax", False), ("torch", True)])
def test_stall_report_names_the_layer_and_what_the_missing_rank_waits_on(backend, other):
    if importlib.util.find_spec(backend) is None:  # the README's base install has TensorFlow only
        pytest.skip("%s is not installed" % backend)
    env = dict(rank_env(), TFRING_STALL_CHECK_TIME_SECONDS="2", TFRING_STALL_SHUTDOWN_TIME_SECONDS="5",
               KERAS_BACKEND=backend, TF_USE_LEGACY_KERAS="0")
    proc = run_ranks(2, [STALL] + (["--other"] if other else []), timeout=300, env=env)
    out = proc.stdout
    # The waiting calls fail with the stall error (TF: DeadlineExceededError; JAX/torch: RuntimeError); a
    # sleeping rank 1 ends with its own RuntimeError.
    assert out.count("DONE ") == 2, out[-5000:]
    if backend == "tensorflow":
        assert out.count("DONE DeadlineExceededError") == (2 if other else 1), out[-5000:]
    reports = [line for line in out.splitlines() if "rank 0] tfring stall inspector" in line]  # rank 0's copies
    assert reports, out[-5000:]
    assert "waited 2 s" in reports[0], reports[0]  # at the first check
    # The gradients' own 2 s may come one check later (JAX compiles the step after the first check's clock).
    first = next((r for r in reports[:2] if "missing ranks [1]" in r), reports[0])
    for var in ("hidden/kernel", "hidden/bias", "head/kernel", "head/bias"):
        assert "(gradient of sequential/%s)" % var in first, first
    if other:
        # The report on the gradients says what the missing rank 1 waits on; the report on rank 1's tensor says
        # what the missing rank 0 waits on. One line when both crossed the threshold at the same check, else
        # two (rank 0 submits its gradients a compile later than rank 1 its allreduce).
        assert "rank 1 waits itself on '" in first and "rank1_metric' since " in first, first
        metric = next((r for r in reports[:3] if "rank1_metric' (allreduce) waited" in r), None)
        assert metric is not None and "missing ranks [0]" in metric, reports[:3]
        assert "rank 0 waits itself on '" in metric and "(gradient of sequential/" in metric.split("rank 0 waits")[1]
    else:
        assert "rank 1 submitted no collective that is waiting (it is busy outside tfring)" in first, first


@pytest.mark.slow
def test_a_frozen_rank_fails_every_other_rank_within_the_deadline_naming_it():
    pytest.importorskip("torch", reason="frozen_job.py trains with tfring.torch")
    # Rank 2 stops (SIGSTOP) without dying: before, the others waited in the negotiation forever, silently. Now the
    # negotiation's waits have the stall deadline: a census names the silent rank at the warning time and every live
    # rank fails at the shutdown time, and the launcher exits non-zero.
    env = dict(rank_env(), TFRING_STALL_CHECK_TIME_SECONDS="2", TFRING_STALL_SHUTDOWN_TIME_SECONDS="6")
    proc = subprocess.run([sys.executable, "-m", "tfring.runner", "-np", "3", sys.executable,
                           os.path.join(ROOT, "tests", "monitor", "frozen_job.py"), "2"],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    out = re.sub(r"(?m)^\[\d+\]<std(?:out|err)>:", "", proc.stdout)  # tfringrun's tags
    assert proc.returncode != 0, out[-5000:]
    assert "FROZEN 2" in out and "NO-ERROR" not in out, out[-5000:]
    for rank in (0, 1):
        line = next((x for x in out.splitlines() if x.split(" ", 2)[:2] == ["FAILED", str(rank)]), None)
        assert line, (rank, out[-5000:])
        seconds = float(line.split()[2])
        assert "rank 2 (host " in line and "stopped responding" in line, line
        # The wait began at the freeze, 0.5 s before this call: the deadline counts from there (+ 5 s, #45).
        assert 6 - 1.5 <= seconds <= 6 + 5, line
    assert "stopped responding" in out and "unless they answer" in out, out[-5000:]  # the warning at 2 s


@pytest.mark.slow
def test_a_rank_frozen_inside_a_transfer_ends_the_job_naming_it():
    pytest.importorskip("torch", reason="frozen_job.py trains with tfring.torch")
    # Rank 2 stops 0.3 s into a 384 MiB allreduce: the others are blocked in MPI, in the data transfer, where the
    # negotiation's polled waits do not reach. Before, they waited there forever; now a watch thread answers their
    # census, names rank 2 at the warning time and ends the job at the shutdown time (nothing returns the call).
    env = dict(rank_env(), TFRING_STALL_CHECK_TIME_SECONDS="1", TFRING_STALL_SHUTDOWN_TIME_SECONDS="4")
    proc = subprocess.run([sys.executable, "-m", "tfring.runner", "-np", "3", sys.executable,
                           os.path.join(ROOT, "tests", "monitor", "frozen_job.py"), "2", "data"],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    out = re.sub(r"(?m)^\[\d+\]<std(?:out|err)>:", "", proc.stdout)
    assert proc.returncode != 0 and "FROZEN 2" in out and "DONE" not in out, out[-5000:]
    warned = [x for x in out.splitlines() if "stopped responding: the data transfer of allreduce 'allreduce.big' has "
              "waited" in x and "unless they answer" in x]
    failed = re.findall(r"\[tfring ERROR rank (\d)\] tfring: rank 2 \(host [^)]+\) stopped responding: the data "
                        r"transfer of allreduce 'allreduce.big' waited (\d+) s .*every live rank ends the job now", out)
    assert warned and failed, out[-5000:]
    # The first live rank to give up ends the job (MPI_Abort) 2 s later: both usually say why, one always does.
    assert {rank for rank, _ in failed} <= {"0", "1"}
    # Blocked in MPI, the waiting ranks spin a core each: the deadlines are short to keep the suite's CPU low.
    assert all(4 <= int(waited) <= 4 + 5 for _, waited in failed), failed  # the deadline (+ 5 s, #45)
