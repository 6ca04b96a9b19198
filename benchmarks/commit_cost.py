"""What a commit costs, and what writing it to disk adds (issue #45 item 4): benchmarks/commit_job.py at np=2 (a
torch MLP, a commit every --commit-every steps) without commits, with in-memory commits (the default), with
`--commit-dir` (written in the background) and with the step waiting for the disk (what a synchronous write would
cost). Launches alternate variant by variant, `--runs` times, so drift on this noisy 2-core machine hits each
alike. Step times are means (a commit's cost spread over its steps), medians over runs; ratios are over the
no-commit variant's.

    .venv/bin/python benchmarks/commit_cost.py --runs 3 --params 4000000 --commit-every 5

Writes benchmarks/results/commit_cost.json, prints a markdown table, and plots docs/commit_cost.png (matplotlib).
`--keras BACKEND` measures instead what a Keras KerasState commit costs with Adam sharded (ZeRO stage 1: the
commit all-gathers the optimizer state) and unsharded (benchmarks/keras_commit_job.py, issue #46), into
commit_cost_keras.json and docs/commit_cost_keras.png.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "commit_cost.json")
PLOT = os.path.join(ROOT, "docs", "commit_cost.png")
VARIANTS = {  # name -> (tfringrun flags, environment)
    "no commit": ([], {"BENCH_COMMIT": "0"}),
    "commit in memory": ([], {}),
    "commit + --commit-dir (background write)": (["--commit-dir", "{dir}"], {}),
    "commit + --commit-dir, step waits for the disk": (["--commit-dir", "{dir}"], {"BENCH_WAIT_FOR_DISK": "1"}),
}
KERAS_VARIANTS = {  # --keras: Adam unsharded and sharded, each without and with a commit
    "no commit": ([], {"BENCH_COMMIT": "0"}),
    "commit in memory": ([], {}),
    "sharded=1, no commit": ([], {"BENCH_COMMIT": "0", "BENCH_SHARDED": "1"}),
    "sharded=1, commit in memory": ([], {"BENCH_SHARDED": "1"}),
}


def launch(flags, env_extra, params, steps, every, tmp, job="commit_job.py"):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1", BENCH_COMMIT_EVERY=str(every), **env_extra)
    fresh = tempfile.mkdtemp(dir=tmp)  # each launch its own commit directory: none resumes another's commits
    cmd = [sys.executable, "-m", "tfring.runner", "-np", "2"] + [f.format(dir=fresh) for f in flags] + [
        sys.executable, os.path.join(HERE, job), str(params), str(steps)]
    proc = subprocess.run(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900)
    lines = [line.split("RESULT ", 1)[1] for line in proc.stdout.splitlines() if "RESULT " in line]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(proc.stdout[-3000:])
    return json.loads(lines[0])


def plot(rows, path=PLOT):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: no %s" % path)
        return
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.barh(range(len(rows)), [r["step_ms"] for r in rows], color=["C%d" % i for i in range(len(rows))])
    ax.set_yticks(range(len(rows)), [r["variant"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean step time (ms), np=2, commits included")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("wrote", path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--commit-every", type=int, default=5)
    p.add_argument("--params", type=int, default=4000000)
    p.add_argument("--keras", metavar="BACKEND", help="the Keras sharded/unsharded commit on this Keras backend")
    args = p.parse_args()
    variants, job, results, plot_path = VARIANTS, "commit_job.py", RESULTS, PLOT
    if args.keras:
        os.environ.update(KERAS_BACKEND=args.keras, TF_USE_LEGACY_KERAS="0")
        variants, job = KERAS_VARIANTS, "keras_commit_job.py"
        results, plot_path = RESULTS.replace(".json", "_keras.json"), PLOT.replace(".png", "_keras.png")
    got = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name, (flags, env) in variants.items():
                got[name].append(launch(flags, env, args.params, args.steps, args.commit_every, tmp, job))
                print("run %d %-48s %s" % (run, name, got[name][-1]), flush=True)
    rows = [{"variant": v, "step_ms": statistics.median(r["step_ms"] for r in rs),
             "commit_ms": statistics.median(r["commit_ms"] for r in rs), "runs": rs} for v, rs in got.items()]
    for r in rows:  # over the same optimizer's run without commits
        base = "sharded=1, no commit" if r["variant"].startswith("sharded") else "no commit"
        r["ratio_to_no_commit"] = r["step_ms"] / statistics.median(x["step_ms"] for x in got[base])
    params = got["no commit"][0]["params"]
    os.makedirs(os.path.dirname(results), exist_ok=True)
    with open(results, "w") as f:
        json.dump({"date": datetime.date.today().isoformat(), "np": 2, "params": params, "steps": args.steps,
                   "keras_backend": args.keras,
                   "commit_every": args.commit_every,
                   "runs": args.runs, "rows": rows}, f, indent=1)
    print("\n%.1f M parameters (%.0f MB float32), np=2, a commit every %d steps\n" % (
        params / 1e6, params / 2.5e5, args.commit_every))
    print("| variant | step ms (mean) | commit() ms | step vs no commit |\n|---|---|---|---|")
    for r in rows:
        print("| %s | %.1f | %.1f | %.2fx |" % (r["variant"], r["step_ms"], r["commit_ms"], r["ratio_to_no_commit"]))
    plot(rows, plot_path)


if __name__ == "__main__":
    main()
