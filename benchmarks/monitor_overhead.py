"""What the monitor costs (issue #32): train_step.py's dense-25M training step (tape mode, np=2, tfring) with the
monitor off (TFRING_MONITOR=0: no accounting, no rounds), on (the default: per-rank accounting, rounds, the
straggler check), on with a metrics file, and with the every-rank timeline on top. Launches alternate variant by
variant, `--runs` times, so drift on this noisy 2-core machine hits each alike; the ratio is each variant's median
step time over the off variant's median.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/monitor_overhead.py --runs 3

Writes benchmarks/results/monitor_overhead.json and prints a markdown table.
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
RESULTS = os.path.join(HERE, "results", "monitor_overhead.json")
VARIANTS = {
    "off": {"TFRING_MONITOR": "0"},
    "on (default)": {},
    "on + metrics file": {"TFRING_METRICS_FILE": "{tmp}/metrics.jsonl"},
    "on + metrics file + every-rank timeline": {"TFRING_METRICS_FILE": "{tmp}/metrics.jsonl",
                                                "TFRING_TIMELINE": "{tmp}/timeline.json"},
}


def launch(env_extra, steps, tmp):
    out = os.path.join(tmp, "r.json")
    if os.path.exists(out):
        os.remove(out)
    env = dict(os.environ, PYTHONPATH=ROOT, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
    env.update({k: v.format(tmp=tmp) for k, v in env_extra.items()})
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    cmd = [mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", sys.executable,
           os.path.join(HERE, "train_step.py"), "--impl", "tfring", "--mode", "tape", "--steps", str(steps),
           "--out", out]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    if not os.path.exists(out):
        raise RuntimeError(proc.stdout[-3000:])
    with open(out) as f:
        return json.load(f)["step_ms"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    times = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name, env in VARIANTS.items():
                ms = launch(env, args.steps, tmp)
                times[name].append(ms)
                print("run %d %-40s %.1f ms/step" % (run, name, ms), flush=True)
    base = statistics.median(times["off"])
    rows = [{"variant": v, "step_ms": t, "median_ms": statistics.median(t),
             "ratio_to_off": statistics.median(t) / base} for v, t in times.items()]
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"date": datetime.date.today().isoformat(), "model": "dense 25.2 M params, tape mode, np=2",
                   "steps": args.steps, "runs": args.runs, "rows": rows}, f, indent=1)
    print("\n| monitor | step ms (median, range) | vs off |\n|---|---|---|")
    for r in rows:
        print("| %s | %.1f (%.1f-%.1f) | %.3fx |" % (r["variant"], r["median_ms"], min(r["step_ms"]),
                                                     max(r["step_ms"]), r["ratio_to_off"]))


if __name__ == "__main__":
    main()
