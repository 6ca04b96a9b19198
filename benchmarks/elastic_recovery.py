"""Recovery of an elastic job from a killed worker, measured from the files tests/elastic/keras_job.py writes:

    PYTHONPATH=. .venv/bin/python benchmarks/elastic_recovery.py [--runs 3]   # ~5 min at --runs 3 (18 jobs)

Each run is `python -m tfring.runner -np 3 --min-np 2 python tests/elastic/keras_job.py` (3 epochs x 8 steps,
tests/conftest.py's rank environment) with rank 1 or rank 0 SIGKILLing itself after step --kill-step (default 10),
for batches_per_commit 1 and 4 (ELASTIC_COMMIT_EVERY; with 4 the commits are at steps 4, 8, 12, ..., so step 10 is
not a commit point), plus the same job without a kill (baseline). Per run:

- recovery: the time the first survivor finished its first step after the rollback (a step above the last commit,
  on 2 ranks) minus the kill time in killed.json;
- lost steps: steps finished before the kill and rolled back (kill step - last committed step), checked against
  the steps the survivors ran again;
- reset: what rank 0 prints ("tfring.elastic: reset (failure): 3 -> 2 ranks in X s": shrink + runtime restart);
- wall: the whole launch, from starting tfring.runner to its exit.

Writes benchmarks/results/elastic_recovery.json, prints a markdown table (median and min-max over the runs),
draws docs/elastic_recovery.png (if matplotlib imports) and puts the table into docs/elastic.md in place of the
line `RESULTS` (--no-doc: not)."""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from conftest import kill_session, rank_env  # noqa: E402  - the tests' rank environment, one definition

JOB = os.path.join(ROOT, "tests", "elastic", "keras_job.py")
RESULTS = os.path.join(HERE, "results", "elastic_recovery.json")
PLOT = os.path.join(ROOT, "docs", "elastic_recovery.png")
DOC = os.path.join(ROOT, "docs", "elastic.md")
DOC_MARK = "RESULTS"
RESET_RE = re.compile(r"tfring\.elastic: reset \(failure\): 3 -> 2 ranks in ([0-9.]+) s")
METRICS = ("recovery_s", "lost_steps", "reset_s", "wall_s")


def read_jsonl(pattern):
    """{pid: rows} of keras_job.py's per-process JSON-lines files."""
    return {f.split(".")[-2]: [json.loads(line) for line in open(f)] for f in glob.glob(pattern)}


def launch(out_dir, victim, commit_every, kill_step, timeout, tf_keras=False):
    """One job; returns (exit code, output, wall seconds)."""
    env = dict(rank_env(), ELASTIC_OUT=out_dir, ELASTIC_COMMIT_EVERY=str(commit_every),
               TF_USE_LEGACY_KERAS="1" if tf_keras else "0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)  # this tree's tfring
    env.pop("ELASTIC_KILL", None)
    if victim is not None:
        env["ELASTIC_KILL"] = "%d:%d" % (victim, kill_step)
    cmd = [sys.executable, "-m", "tfring.runner", "-np", "3", "--min-np", "2", "python", JOB]
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        out, _ = proc.communicate()
        raise RuntimeError("elastic job still running after %d s:\n%s" % (timeout, out[-5000:]))
    return proc.returncode, out, time.time() - start


def measure(out_dir, out, wall, victim, kill_step):
    """The run's numbers from the files the job wrote (see the module docstring)."""
    steps = read_jsonl(os.path.join(out_dir, "steps.*.jsonl"))
    commits = read_jsonl(os.path.join(out_dir, "commits.*.jsonl"))
    finals = glob.glob(os.path.join(out_dir, "final.*.npz"))
    final_steps = sorted({rows[-1]["step"] for rows in steps.values() if rows})
    run = {"wall_s": wall, "final_step": final_steps[-1] if final_steps else None, "finished_ranks": len(finals)}
    if victim is None:
        return run
    with open(os.path.join(out_dir, "killed.json")) as f:
        killed = json.load(f)
    survivors = [pid for pid, rows in steps.items() if rows and rows[-1]["size"] == 2]
    if len(survivors) != 2 or len(finals) != 2:
        raise RuntimeError("expected 2 survivors, got %d (%d finished):\n%s" % (len(survivors), len(finals),
                                                                             out[-5000:]))
    # The last commit before the kill: every rank commits at the same steps; the survivors' on 3 ranks.
    last_commit = max(c["step"] for pid in survivors for c in commits.get(pid, []) if c["size"] == 3)
    after = [r for pid in survivors for r in steps[pid] if r["size"] == 2]
    first = min((r for r in after if r["step"] > last_commit), key=lambda r: r["t"])
    redone = sorted({r["step"] for r in after if r["step"] <= killed["step"]})
    lost = killed["step"] - last_commit
    if redone != list(range(last_commit + 1, killed["step"] + 1)):  # the rollback is what the commits say
        raise RuntimeError("survivors ran steps %s again after a rollback to %d (kill at %d)"
                           % (redone, last_commit, killed["step"]))
    if killed["step"] != kill_step:
        raise RuntimeError("killed at step %d, not %d" % (killed["step"], kill_step))
    reset = RESET_RE.findall(out)
    run.update(kill_step=killed["step"], last_commit=last_commit, lost_steps=lost,
               recovery_s=first["t"] - killed["t"], first_step_after=first["step"],
               reset_s=float(reset[0]) if reset else None)
    return run


def summarize(runs):
    out = {}
    for key in METRICS + ("final_step",):
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def cell(summary, key, fmt):
    s = summary.get(key)
    if not s:
        return "-"
    if s["min"] == s["max"]:
        return fmt % s["median"]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (s["median"], s["min"], s["max"])


def table(data):
    """The markdown table: one row per configuration, median (min-max) over the runs."""
    base = {c["commit_every"]: c["summary"] for c in data["configs"] if c["victim"] is None}
    lines = ["%d runs each, median (min-max): `-np 3 --min-np 2`, 3 epochs x 8 steps of the %s job" % (
                 data["runs"], "tf_keras" if data.get("keras") == "tf_keras" else "Keras 3"),
             "`tests/elastic/keras_job.py`, SIGKILL after step %d. Recovery includes the reset, the state sync and "
             "retracing" % data["kill_step"],
             "the train function; a job on 2 ranks is faster than on 3 here (2 cores).", "",
             "| killed rank | batches_per_commit | recovery, kill to next step (s) | lost steps | reset (s) "
             "| final step | wall (s) | wall without a kill (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for c in data["configs"]:
        if c["victim"] is None:
            continue
        s = c["summary"]
        lines.append("| %d | %d | %s | %s | %s | %s | %s | %s |" % (
            c["victim"], c["commit_every"], cell(s, "recovery_s", "%.2f"), cell(s, "lost_steps", "%d"),
            cell(s, "reset_s", "%.2f"), cell(s, "final_step", "%d"), cell(s, "wall_s", "%.1f"),
            cell(base.get(c["commit_every"], {}), "wall_s", "%.1f")))
    return "\n".join(lines)


def plot(data):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: no %s" % PLOT)
        return
    commit_values = sorted({c["commit_every"] for c in data["configs"]})

    def label(c):
        return "%s\ncommit/%d" % ("no kill" if c["victim"] is None else "kill %d" % c["victim"], c["commit_every"])

    killed = [c for c in data["configs"] if c["victim"] is not None]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, key, title, configs in ((axes[0], "recovery_s", "recovery: kill to next step (s)", killed),
                                    (axes[1], "lost_steps", "lost (redone) steps", killed),
                                    (axes[2], "wall_s", "job wall time (s)", data["configs"])):
        med = [c["summary"][key]["median"] for c in configs]
        err = [[m - c["summary"][key]["min"] for m, c in zip(med, configs)],
               [c["summary"][key]["max"] - m for m, c in zip(med, configs)]]
        ax.bar(range(len(configs)), med, yerr=err, capsize=4,
               color=["C%d" % commit_values.index(c["commit_every"]) for c in configs])
        ax.set_xticks(range(len(configs)), [label(c) for c in configs], fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("elastic recovery, -np 3 --min-np 2, SIGKILL at step %d (median, min-max of %d runs)"
                 % (data["kill_step"], data["runs"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=100)
    plt.close(fig)
    print("wrote %s" % PLOT)


def write_doc(md):
    """Replaces the line `RESULTS` of docs/elastic.md (only that line; read right before writing)."""
    with open(DOC) as f:
        lines = f.read().split("\n")
    hits = [i for i, line in enumerate(lines) if line == DOC_MARK]
    if len(hits) != 1:
        print("%s: %d line(s) `%s`, not exactly one: the table is not written there" % (DOC, len(hits), DOC_MARK))
        return
    lines[hits[0]:hits[0] + 1] = md.split("\n")
    with open(DOC, "w") as f:
        f.write("\n".join(lines))
    print("wrote the table into %s" % DOC)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="repetitions of each configuration (default 3)")
    parser.add_argument("--kill-step", type=int, default=10, help="the victim dies after this step (default 10)")
    parser.add_argument("--commit-every", default="1,4", help="batches_per_commit values (default 1,4)")
    parser.add_argument("--victims", default="1,0", help="ranks to kill (default 1,0)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds one job may take (default 300)")
    parser.add_argument("--tf-keras", action="store_true", help="run the job with tf_keras (TF_USE_LEGACY_KERAS=1)")
    parser.add_argument("--no-doc", action="store_true", help="do not write the table into docs/elastic.md")
    args = parser.parse_args()
    commit_every = [int(v) for v in args.commit_every.split(",")]
    victims = [int(v) for v in args.victims.split(",")]
    configs = [(None, k) for k in commit_every] + [(v, k) for v in victims for k in commit_every]
    data = {"runs": args.runs, "kill_step": args.kill_step, "np": 3, "min_np": 2, "job": os.path.relpath(JOB, ROOT),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "keras": "tf_keras" if args.tf_keras else "keras", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "configs": []}
    for victim, k in configs:
        runs = []
        for i in range(args.runs):
            tmp = tempfile.mkdtemp(prefix="tfring-elastic-bench-")
            try:
                rc, out, wall = launch(tmp, victim, k, args.kill_step, args.timeout, args.tf_keras)
                if rc != 0:
                    raise RuntimeError("job failed (exit %d):\n%s" % (rc, out[-5000:]))
                run = measure(tmp, out, wall, victim, args.kill_step)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            runs.append(run)
            print("victim=%s commit_every=%d run %d: %s" % (victim, k, i + 1, json.dumps(
                {key: round(v, 3) if isinstance(v, float) else v for key, v in run.items()})), flush=True)
        data["configs"].append({"victim": victim, "commit_every": k, "runs": runs, "summary": summarize(runs)})
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(data, f, indent=1)
    print("wrote %s" % RESULTS)
    md = table(data)
    print()
    print(md)
    print()
    plot(data)
    if not args.no_doc:
        write_doc(md)


if __name__ == "__main__":
    main()
