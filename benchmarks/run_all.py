"""The whole benchmark in one command, side by side in one run: tfring vs raw mpi4py vs MWMS and, given an
environment that has it (`--horovod-python`, see build_horovod_env.sh), Horovod 0.28.1. Each repetition runs the
collective suite (np=2) for every library, then the training-step benchmark (dense model, custom loop and Keras
fit, np=1 on one core vs np=2) for every library, so drift on this noisy machine hits all of them alike; then
autotune vs hand-picked fusion thresholds. Medians across runs go to summary.json / summary.md, bus bandwidth to
bus_bandwidth.png.

    python benchmarks/run_all.py --runs 3 --horovod-python ~/horovod-0.28.1-env/bin/python
    python benchmarks/run_all.py --quick    # about 8 minutes: issue #30's ratios and goals from one run (quick.py)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import quick
from impl import write_json
from report import autotune_md, plot, suite_md, train_md

HERE = os.path.dirname(os.path.abspath(__file__))
HAND_PICKED_MIB = [2, 8, 32, 64]


def job(np_, script, out, *args, impl="tfring", horovod_python=None, env=None):
    """Runs one benchmark job (tfringrun, or the Horovod environment's own mpirun); returns its --out JSON."""
    base = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    if impl == "horovod":
        bindir = os.path.dirname(horovod_python)
        base.pop("PYTHONPATH", None)
        base.update(PATH=bindir + os.pathsep + base["PATH"], OMPI_ALLOW_RUN_AS_ROOT="1",
                    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        # What horovodrun runs: mpirun without core binding (tfringrun passes the same flags).
        cmd = [os.path.join(bindir, "mpirun"), "-np", str(np_), "--oversubscribe", "--bind-to", "none",
               horovod_python]
    else:
        cmd = [sys.executable, "-m", "tfring.runner", "-np", str(np_), "python"]
    cmd += [os.path.join(HERE, script), "--out", out] + list(args)
    print("+", " ".join(cmd), " ".join("%s=%s" % kv for kv in (env or {}).items()), flush=True)
    if os.path.exists(out):
        os.remove(out)
    proc = subprocess.run(cmd, env=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0 or not os.path.exists(out):
        sys.exit("benchmark job failed:\n" + proc.stdout[-5000:])
    with open(out) as f:
        return json.load(f)


def median_rows(runs):
    """Per case, the median of every numeric column across runs, and its range."""
    out = []
    for i, first in enumerate(runs[0]):
        row = {"case": first["case"], "bytes": first["bytes"]}
        for key in first:
            if key.endswith("_ms") or key.endswith("_faults"):
                values = [run[i][key] for run in runs]
                row[key] = statistics.median(values)
                row[key + "_range"] = [min(values), max(values)]
        out.append(row)
    return out


def run_suite(args, impls):
    """Per run, one job per library; each row gets the library's columns prefixed (tfring_eager_ms, ...)."""
    shapes = os.path.join(args.out, "resnet50_shapes.json")
    merged_runs = []
    for i in range(args.runs):
        merged = None
        for impl in impls:
            extra = ["--impl", impl, "--shapes", shapes] + (["--mwms"] if impl == "tfring" else [])
            rows = job(2, "suite.py", os.path.join(args.out, "suite_%s_run%d.json" % (impl, i + 1)), *extra,
                       impl=impl, horovod_python=args.horovod_python)["rows"]
            if merged is None:
                merged = [{"case": r["case"], "bytes": r["bytes"]} for r in rows]
            for m, r in zip(merged, rows):
                for key, value in r.items():
                    if key.endswith("_ms") or key.endswith("_faults"):
                        # raw MPI and TF's own costs: from tfring's job (the Horovod job's are kept apart)
                        own = key.startswith(("raw_", "mwms_", "tf_"))
                        m[key if own and impl == "tfring" else "%s_%s" % (impl, key)] = value
        merged_runs.append(merged)
    return median_rows(merged_runs)


TRAIN_CASES = [("tape", "none"), ("tape", "tfring"), ("tape", "horovod"), ("tape", "mwms"), ("fit", "tfring"),
               ("fit", "horovod")]


def run_train(args, impls):
    results = {}
    for i in range(args.runs):
        for mode, impl in TRAIN_CASES:
            if impl == "horovod" and "horovod" not in impls:
                continue
            for np_ in (1, 2):
                out = os.path.join(args.out, "train_%s_%s_np%d_run%d.json" % (mode, impl, np_, i + 1))
                r = job(np_, "train_step.py", out, "--impl", impl, "--mode", mode,
                        *(["--one-core"] if np_ == 1 else []), impl=impl, horovod_python=args.horovod_python)
                results.setdefault((mode, impl, np_), []).append(r["samples_per_sec"])
    rows = []
    for mode, impl in TRAIN_CASES:
        if (mode, impl, 1) not in results:
            continue
        one, two = results[(mode, impl, 1)], results[(mode, impl, 2)]
        eff = [b / (2 * a) for a, b in zip(one, two)]
        rows.append({"mode": mode, "impl": impl, "np1_samples_per_sec": statistics.median(one),
                     "np2_samples_per_sec": statistics.median(two), "efficiency": statistics.median(eff),
                     "efficiency_range": [min(eff), max(eff)]})
    return rows


def run_autotune(args):
    """Hand-picked thresholds, then autotune, each in its own job; the hand-picked set is run before and after
    the tuned job and the faster of the two counts, so drift on this noisy machine does not favour either."""
    hand, out = {}, os.path.join(args.out, "autotune_job.json")
    for sweep in range(2):
        for mib in HAND_PICKED_MIB:
            r = job(2, "autotune_bench.py", out, env={"TFRING_FUSION_THRESHOLD": str(mib << 20)})
            if mib not in hand or r["step_ms"] < hand[mib]["step_ms"]:
                hand[mib] = r
        if sweep == 0:
            tuned = job(2, "autotune_bench.py", out, env={
                "TFRING_AUTOTUNE": "1", "TFRING_AUTOTUNE_LOG": os.path.join(args.out, "autotune_log.csv")})
    hand = [hand[m] for m in HAND_PICKED_MIB]
    best = min(hand, key=lambda h: h["step_ms"])
    return {"hand_picked": hand, "tuned": tuned, "tuned_over_best": tuned["step_ms"] / best["step_ms"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--parts", default="suite,train,autotune", help="comma-separated subset to run")
    parser.add_argument("--horovod-python", help="python of an environment with Horovod (build_horovod_env.sh)")
    parser.add_argument("--quick", action="store_true", help="one short run printing the ratios and goals only")
    parser.add_argument("--keras-nightly-python", help="--quick: keras-nightly's interpreter (default: "
                        "build_keras_nightly_env.sh's, ~/keras-nightly-env/bin/python)")
    args = parser.parse_args()
    if args.keras_nightly_python:
        import keras_backends
        keras_backends.NIGHTLY_PYTHON = args.keras_nightly_python
    os.makedirs(args.out, exist_ok=True)
    if args.quick:
        summary, md = quick.run(args, ["tfring"] + (["horovod"] if args.horovod_python else []), job, median_rows)
        write_json(os.path.join(args.out, "quick.json"), summary)
        print("\n".join(md))
        return
    parts = args.parts.split(",")
    impls = ["tfring"] + (["horovod"] if args.horovod_python else [])
    summary, md = {"np": 2, "runs": args.runs, "impls": impls}, []
    if "suite" in parts:
        summary["suite"] = run_suite(args, impls)
        plot(summary["suite"], impls, 2, os.path.join(args.out, "bus_bandwidth.png"))
        md += suite_md(summary["suite"], impls, args.runs)
    if "train" in parts:
        summary["train"] = run_train(args, impls)
        md += train_md(summary["train"], args.runs)
    if "autotune" in parts:
        summary["autotune"] = run_autotune(args)
        md += autotune_md(summary["autotune"])
    name = "summary" if len(parts) == 3 else "summary_" + "_".join(parts)
    write_json(os.path.join(args.out, name + ".json"), summary)
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
