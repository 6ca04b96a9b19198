"""Keras training step on every Keras 3 backend (issue #29): tfring.keras vs the backend's own data-parallel
option vs the no-collective ceiling, np=1 (pinned to one core) and np=2, all in one run:

    .venv/bin/python benchmarks/keras_backends.py --runs 1 [--backends jax,torch] [--no-doc]

Each run launches benchmarks/keras_backends_job.py once per (backend, impl, np), one job after another, so drift
on this noisy 2-core machine hits every case alike. Writes benchmarks/results/keras_backends.json (every job of
every run; --merge keeps the runs already there, so runs done one after another summarise together), prints the
markdown table (medians and ranges), draws docs/keras_backends.png (if matplotlib imports) and puts the table into
docs/benchmarks-frameworks.md between `<!-- keras-backends -->` and `<!-- /keras-backends -->` (--no-doc: not).

Efficiency (as train_step.py) = samples/s at np=2 / (2 x samples/s at np=1) = np=1 step time / np=2 step time at
the fixed per-rank batch; "of ceiling" = efficiency / the no-collective Keras fit's efficiency in the same run.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOB = os.path.join(HERE, "keras_backends_job.py")
sys.path.insert(0, HERE)
from doc_block import replace_block  # noqa: E402
from tfring.runner.mpirun import huge_pages  # noqa: E402
RESULTS = os.path.join(HERE, "results", "keras_backends.json")
PLOT = os.path.join(ROOT, "docs", "keras_backends.png")
DOC = os.path.join(ROOT, "docs", "benchmarks-frameworks.md")
MARK, END = "<!-- keras-backends -->", "<!-- /keras-backends -->"
IMPLS = {"tensorflow": ("none", "tfring", "own"), "jax": ("none", "tfring", "own"),
         "torch": ("none", "tfring", "own_none", "own"), "torch-nightly": ("none", "tfring", "keras_dp")}
OWN = {"tensorflow": "MultiWorkerMirroredStrategy, Keras fit",
       "jax": "keras.distribution.DataParallel + jax.distributed (gloo), Keras fit",
       "torch": "DistributedDataParallel (gloo), custom loop",
       "torch-nightly": "keras.distribution.DataParallel (torch DDP, gloo), Keras fit"}
# "torch-nightly": the torch backend under keras-nightly (3.16 dev), the first Keras with its own torch data
# parallel; its interpreter comes from benchmarks/build_keras_nightly_env.sh (same torch, mpi4py and tfring).
NIGHTLY_PYTHON = os.path.expanduser("~/keras-nightly-env/bin/python")
LABEL = {"none": "no collective, Keras fit (ceiling)", "tfring": "tfring.keras DistributedOptimizer, Keras fit",
         "own_none": "no collective, custom loop (DDP's ceiling)"}


def launch(backend, impl, np_, steps, out, env=None):
    python = NIGHTLY_PYTHON if backend == "torch-nightly" else sys.executable
    if not os.path.exists(python):
        return {"backend": backend, "impl": impl, "np": np_, "error": "no %s: run benchmarks/"
                "build_keras_nightly_env.sh (or --keras-nightly-python)" % python}
    # The source tree's tfring where it is built in place (setup.py build_ext --inplace), else the installed one.
    tree = {"PYTHONPATH": ROOT} if os.path.exists(os.path.join(ROOT, "tfring", "libtfring_core.so")) else {}
    env = dict(os.environ, **(env or {}), **tree, KERAS_BACKEND=backend.split("-")[0], OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1",
               GLIBC_TUNABLES=huge_pages(os.environ.get("GLIBC_TUNABLES")))  # every impl as tfringrun's ranks
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    cmd = [mpirun, "-np", str(np_), "--oversubscribe", "--bind-to", "none", python, JOB, "--impl", impl,
           "--steps", str(steps), "--out", out] + (["--one-core"] if np_ == 1 else [])
    print("+ KERAS_BACKEND=%s %s" % (backend, " ".join(cmd[5:])), flush=True)
    if os.path.exists(out):
        os.remove(out)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=300)
        tail = proc.stdout[-3000:]
    except subprocess.TimeoutExpired as e:
        tail = "timed out after 300 s: " + (e.stdout or b"")[-2000:].decode(errors="replace")
    if not os.path.exists(out):
        print(tail, flush=True)
        return {"backend": backend, "impl": impl, "np": np_, "error": tail.strip().splitlines()[-1][:300]}
    with open(out) as f:
        r = json.load(f)
    r["backend"] = backend  # the row's key ("torch-nightly" runs KERAS_BACKEND=torch)
    print("  ", r.get("error") or "%.1f ms/step, ranks used %.2f-%.2f cores" % (
        r["step_ms"], r["cores_used_min"], r["cores_used_max"]), flush=True)
    return r


def summarise(runs):
    """Per (backend, impl): medians/ranges across runs of np=1 and np=2 samples/s, efficiency, share of ceiling."""
    rows = []
    mpi = [r["step_ms"] for run in runs for r in run if r["impl"] == "mpi" and "step_ms" in r]
    for backend, impls in IMPLS.items():
        ceiling = {}
        for impl in impls:
            jobs = [{r["np"]: r for r in run if r["backend"] == backend and r["impl"] == impl} for run in runs]
            jobs = [j for j in jobs if 1 in j and 2 in j]
            if not jobs:
                continue
            err = next((j[n]["error"] for j in jobs for n in (2, 1) if "error" in j[n]), None)
            if err:
                rows.append({"backend": backend, "impl": impl, "error": err})
                continue
            one = [j[1]["samples_per_sec"] for j in jobs]
            two = [j[2]["samples_per_sec"] for j in jobs]
            eff = [b / (2 * a) for a, b in zip(one, two)]
            row = {"backend": backend, "impl": impl, "np1_samples_per_sec": statistics.median(one),
                   "np2_samples_per_sec": statistics.median(two), "np2_step_ms": statistics.median(
                       [j[2]["step_ms"] for j in jobs]), "efficiency": statistics.median(eff),
                   "efficiency_runs": eff, "np2_samples_per_sec_runs": two, "np1_samples_per_sec_runs": one}
            if impl == "none":
                ceiling = dict(enumerate(eff))
            if ceiling and len(ceiling) == len(eff):
                of = [e / ceiling[i] for i, e in enumerate(eff)]
                row.update(of_ceiling=statistics.median(of), of_ceiling_runs=of)
            rows.append(row)
            if impl == "none" and mpi:  # the ceiling's step plus MPI's own allreduce of the gradients, serial
                ms = statistics.median(mpi)
                rows.append({"backend": backend, "impl": "serial", "mpi_ms": ms,
                             "of_ceiling": row["np2_step_ms"] / (row["np2_step_ms"] + ms)})
    return rows


def table(rows, meta):
    lines = [MARK, "", "## Keras fit on every backend: tfring.keras vs each backend's own option (issue #29)", "",
             "Run of %s, %d run(s), `benchmarks/keras_backends.py`: the dense model of `train_step.py` (25.2 M "
             "params), batch 64 per rank, SGD, np=1 pinned to one core vs np=2 (one core each), one compute thread "
             "per rank on every backend (TF intra-op 1; torch `set_num_threads(1)`; XLA "
             "`--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`). %s. Efficiency = samples/s at "
             "np=2 / (2 x np=1); \"of ceiling\" = efficiency / the no-collective Keras fit's efficiency on the "
             "same backend in the same run. Per run values in brackets." % (meta["date"], meta["runs"],
                                                                         ", ".join(meta["versions"])), "",
             "| backend | data-parallel option | np=1 samples/s | np=2 samples/s | np=2 step ms | efficiency | "
             "of ceiling | tfring np=2 / this np=2 |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    tf_rows = {(r["backend"], r["impl"]): r for r in rows}
    runs = lambda v: " (%s)" % ", ".join("%.2f" % x for x in v) if len(v) > 1 else ""  # noqa: E731
    for r in rows:
        own = r["impl"] in ("own", "keras_dp")
        label = OWN[r["backend"]] if own else LABEL.get(r["impl"])
        if r["impl"] == "serial":  # the bound row
            lines.append("| %s | (bound) ceiling's step + raw MPI in-place allreduce of each gradient (%.0f ms), "
                         "serial | | | | | %.2f | |" % (r["backend"], r["mpi_ms"], r["of_ceiling"]))
            continue
        if "error" in r:
            lines.append("| %s | %s | fails: `%s` | | | | | |" % (r["backend"], label, r["error"].replace("|", "/")))
            continue
        t = tf_rows.get((r["backend"], "tfring"))
        vs = ("%.2f" % (t["np2_samples_per_sec"] / r["np2_samples_per_sec"])
              if t and "error" not in t and own else "")
        lines.append("| %s | %s | %.1f | %.1f | %.0f | %.2f%s | %s | %s |" % (
            r["backend"], label, r["np1_samples_per_sec"], r["np2_samples_per_sec"], r["np2_step_ms"],
            r["efficiency"], runs(r["efficiency_runs"]),
            "%.2f%s" % (r["of_ceiling"], runs(r["of_ceiling_runs"])) if "of_ceiling" in r else "", vs))
    return lines + ["", END]


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    backends = list(IMPLS)
    for k, impl in enumerate(("none", "own_none", "tfring", "own")):
        impls = (impl, "keras_dp") if impl == "own" else (impl,)
        xs, ys = [], []
        for i, b in enumerate(backends):
            r = next((r for r in rows if r["backend"] == b and r["impl"] in impls and "error" not in r), None)
            if r:
                xs.append(i + (k - 1.5) * 0.2)
                ys.append(r["efficiency"])
        ax.bar(xs, ys, 0.2, label=LABEL.get(impl, "backend's own option"))
    ax.set_xticks(range(len(backends)), backends)
    ax.set_ylabel("efficiency at np=2 (1.0 = linear)")
    ax.set_ylim(0, 1.4)
    ax.set_title("Keras training step, dense 25M, np=2 vs np=1 (one core each)")
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


PROFILE_ENVS = [{}, {"TFRING_CYCLE_TIME": "0.2"}, {"TFRING_CYCLE_TIME": "5"},
                {"TFRING_FUSION_THRESHOLD": "0"}, {"TFRING_FUSION_THRESHOLD": str(128 << 20)}]


def profile(steps):
    """tfring at np=2 on JAX and torch under other cycle times / fusion thresholds, next to the ceiling and raw
    MPI's allreduce of the gradients (one job each); rank 0's timeline of a default job: ms per step in each
    activity over all of the job's fit steps (3 warm-up + --steps timed)."""
    out, rows = os.path.join(HERE, "results", "kb_job.json"), []
    rows.append(dict(launch("tensorflow", "mpi", 2, steps, out), env={}))
    for backend in ("jax", "torch"):
        rows.append(dict(launch(backend, "none", 2, steps, out), env={}))
        for env in PROFILE_ENVS:
            rows.append(dict(launch(backend, "tfring", 2, steps, out, env), env=env))
        trace = os.path.join(HERE, "results", "kb_timeline_%s.json" % backend)
        r = launch(backend, "tfring", 2, steps, out, {"TFRING_TIMELINE": trace})
        rows.append(dict(r, env={"TFRING_TIMELINE": trace}, timeline_ms=timeline_ms(trace, steps + 3)))
    with open(os.path.join(HERE, "results", "keras_backends_profile.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        print("%-10s %-7s %-40s %s" % (r["backend"], r["impl"], r["env"], "%.1f ms" % r["step_ms"] if "step_ms" in r
                                      else r.get("error")), r.get("timeline_ms", ""))


def timeline_ms(path, steps):
    """Per activity of tfring's timeline (rank 0): wall ms per fit step it covers (union over tensors)."""
    try:
        with open(path) as f:
            text = f.read().strip().rstrip(",")
        events = json.loads(text if text.endswith("]") else text + "]")
    except (OSError, ValueError) as e:
        return {"error": repr(e)}
    stacks, spans = {}, {}
    for e in events:
        if e.get("ph") == "B":
            stacks.setdefault(e["tid"], []).append(e)
        elif e.get("ph") == "E" and stacks.get(e["tid"]):
            b = stacks[e["tid"]].pop()
            spans.setdefault(b["name"], []).append((b["ts"], e["ts"]))
    out = {}
    for name, intervals in spans.items():
        total, end = 0, None
        for a, b in sorted(intervals):
            if end is None or a > end:
                total, end = total + b - a, b
            elif b > end:
                total, end = total + b - end, b
        out[name] = round(total / 1000 / steps, 1)
    return out


def main():
    global NIGHTLY_PYTHON
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--backends", default="tensorflow,jax,torch,torch-nightly")
    parser.add_argument("--keras-nightly-python", default=NIGHTLY_PYTHON,
                        help="the torch-nightly rows' interpreter (benchmarks/build_keras_nightly_env.sh)")
    parser.add_argument("--merge", action="store_true", help="summarise with the runs already in the JSON")
    parser.add_argument("--no-doc", action="store_true")
    parser.add_argument("--profile", action="store_true", help="only the tfring settings probe (see profile())")
    args = parser.parse_args()
    NIGHTLY_PYTHON = args.keras_nightly_python
    if args.profile:
        return profile(args.steps)
    old = []
    if args.merge and os.path.exists(RESULTS):
        with open(RESULTS) as f:
            old = json.load(f)["runs"]
    runs = []
    for _ in range(args.runs):
        run = [launch("tensorflow", "mpi", 2, args.steps, os.path.join(HERE, "results", "kb_job.json"))]
        for backend in args.backends.split(","):
            for impl in IMPLS[backend]:
                for np_ in (1, 2):
                    run.append(launch(backend, impl, np_, args.steps, os.path.join(HERE, "results", "kb_job.json")))
        runs.append(run)
    merged = old + runs
    versions = sorted({r["version"] for run in merged for r in run if "version" in r} |
                      {"keras " + r["keras"] for run in merged for r in run if "keras" in r})
    meta = {"date": datetime.date.today().isoformat(), "runs": len(merged), "versions": versions}
    rows = summarise(merged)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"meta": meta, "rows": rows, "runs": merged}, f, indent=1)
    md = table(rows, meta)
    print("\n".join(md))
    plot(rows, PLOT)
    if not args.no_doc:
        replace_block(DOC, md)


if __name__ == "__main__":
    main()
