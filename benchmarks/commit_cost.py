"""What a commit costs, and what writing it to disk adds (issue #45 item 4): benchmarks/commit_job.py at np=2 (a
torch MLP, a commit every --commit-every steps) without commits, with in-memory commits (the default), with
`--commit-dir` (written in the background) and with the step waiting for the disk (what a synchronous write would
cost). Launches alternate variant by variant, `--runs` times, so drift on this noisy 2-core machine hits each
alike. Step times are means (a commit's cost spread over its steps), medians over runs; ratios are over the
no-commit variant's.

    .venv/bin/python benchmarks/commit_cost.py --runs 3 --params 4000000 --commit-every 5

Writes benchmarks/results/commit_cost.json, prints a markdown table, and plots docs/commit_cost.png (matplotlib).
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


def launch(flags, env_extra, params, steps, every, tmp):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1", BENCH_COMMIT_EVERY=str(every), **env_extra)
    fresh = tempfile.mkdtemp(dir=tmp)  # each launch its own commit directory: none resumes another's commits
    cmd = [sys.executable, "-m", "tfring.runner", "-np", "2"] + [f.format(dir=fresh) for f in flags] + [
        sys.executable, os.path.join(HERE, "commit_job.py"), str(params), str(steps)]
    proc = subprocess.run(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900)
    lines = [line.split("RESULT ", 1)[1] for line in proc.stdout.splitlines() if "RESULT " in line]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(proc.stdout[-3000:])
    return json.loads(lines[0])


def plot(rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: no %s" % PLOT)
        return
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.barh(range(len(rows)), [r["step_ms"] for r in rows], color=["C%d" % i for i in range(len(rows))])
    ax.set_yticks(range(len(rows)), [r["variant"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean step time (ms), np=2, commits included")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    print("wrote", PLOT)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--commit-every", type=int, default=5)
    p.add_argument("--params", type=int, default=4000000)
    args = p.parse_args()
    got = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name, (flags, env) in VARIANTS.items():
                got[name].append(launch(flags, env, args.params, args.steps, args.commit_every, tmp))
                print("run %d %-48s %s" % (run, name, got[name][-1]), flush=True)
    base = statistics.median(r["step_ms"] for r in got["no commit"])
    rows = [{"variant": v, "step_ms": statistics.median(r["step_ms"] for r in rs),
             "commit_ms": statistics.median(r["commit_ms"] for r in rs), "runs": rs} for v, rs in got.items()]
    for r in rows:
        r["ratio_to_no_commit"] = r["step_ms"] / base
    params = got["no commit"][0]["params"]
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"date": datetime.date.today().isoformat(), "np": 2, "params": params, "steps": args.steps,
                   "commit_every": args.commit_every,
                   "runs": args.runs, "rows": rows}, f, indent=1)
    print("\n%.1f M parameters (%.0f MB float32), np=2, a commit every %d steps\n" % (
        params / 1e6, params / 2.5e5, args.commit_every))
    print("| variant | step ms (mean) | commit() ms | step vs no commit |\n|---|---|---|---|")
    for r in rows:
        print("| %s | %.1f | %.1f | %.2fx |" % (r["variant"], r["step_ms"], r["commit_ms"], r["ratio_to_no_commit"]))
    plot(rows)


if __name__ == "__main__":
    main()
