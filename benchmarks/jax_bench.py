"""Collectives inside compiled code, side by side in one run (issue #28): tfring.jax's allreduce inside jax.jit vs
mpi4jax vs JAX's own multi-process CPU collectives (jax.distributed + gloo, psum under shard_map) vs raw mpi4py,
4 KiB - 64 MiB at np=2 (benchmarks/jax_job.py, all of them in the same processes, alternating per size); then the
dense training step (benchmarks/train_step.py, 25.2 M params) with TF `jit_compile=True` vs without, for the
custom loop (DistributedGradientTape), Keras fit (DistributedOptimizer) and the same loop with no collective (what
XLA does to the computation alone). Compiled and uncompiled jobs alternate, their order flipped every run.

    PYTHONPATH=. .venv/bin/python benchmarks/jax_bench.py --runs 1            # ~5 min per run here
    PYTHONPATH=. .venv/bin/python benchmarks/jax_bench.py --runs 1 --append   # a second run, kept with the first
    PYTHONPATH=. .venv/bin/python benchmarks/jax_bench.py --cycle-probe --append  # small sizes vs cycle time
    PYTHONPATH=. .venv/bin/python benchmarks/jax_bench.py --report-only       # tables and plot from the JSON

Writes benchmarks/results/jax_bench.json (every run), docs/jax_allreduce.png, and the tables into
docs/benchmarks-frameworks.md between `<!-- jax-bench -->` and `<!-- /jax-bench -->` (--no-doc: not)."""
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
sys.path.insert(0, HERE)
from doc_block import replace_block  # noqa: E402
from run_all import job  # noqa: E402

RESULTS = os.path.join(HERE, "results", "jax_bench.json")
PLOT = os.path.join(ROOT, "docs", "jax_allreduce.png")
DOC = os.path.join(ROOT, "docs", "benchmarks-frameworks.md")
MARK, END = "<!-- jax-bench -->", "<!-- /jax-bench -->"
ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}
TRAIN = [("tape", "tfring"), ("fit", "tfring"), ("tape", "none")]
COLUMNS = [("raw", "raw mpi4py"), ("raw_inplace", "raw in place"), ("tfring", "tfring.jax jit"),
           ("tfring_donated", "tfring.jax jit, donated"), ("mpi4jax", "mpi4jax jit"),
           ("gloo", "jax.distributed gloo psum"), ("jax_alone", "JAX alone (v + 1)")]


def git_state():
    def git(*a):
        return subprocess.run(["git"] + list(a), cwd=ROOT, stdout=subprocess.PIPE, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "dirty_paths": len(git("status", "--porcelain").splitlines())}


def one_run(index, tmp):
    run = {"date": datetime.date.today().isoformat(), "git": git_state()}
    run["jax"] = job(2, "jax_job.py", os.path.join(tmp, "jax.json"), "--gloo", env=ENV)
    run["train"] = []
    order = (False, True) if index % 2 == 0 else (True, False)
    for mode, impl in TRAIN:
        for jit in order:
            r = job(2, "train_step.py", os.path.join(tmp, "train.json"), "--impl", impl, "--mode", mode,
                    *(["--jit-compile"] if jit else []), env=ENV)
            run["train"].append(r)
    return run


def cycle_probe(tmp):
    """tfring's small-message latency against the core's cycle time (TFRING_CYCLE_TIME, default 1 ms)."""
    return [{"cycle_time_ms": ct, "rows": job(2, "jax_job.py", os.path.join(tmp, "probe.json"), "--max-bytes",
                                               str(1 << 20), env=dict(ENV, TFRING_CYCLE_TIME=str(ct)))["collectives"]}
            for ct in (1, 5)]


def probe_table(probe):
    lines = ["| size | " + " | ".join("tfring.jax jit ms, TFRING_CYCLE_TIME=%g" % p["cycle_time_ms"] for p in probe)
             + " | mpi4jax jit ms (same jobs) |", "| --- |" + " --- |" * (len(probe) + 1)]
    for i, row in enumerate(probe[0]["rows"]):
        lines.append("| %s | %s | %s |" % (size_label(row["bytes"]), " | ".join(
            "%.3f" % p["rows"][i]["tfring_ms"] for p in probe), " / ".join(
            "%.3f" % p["rows"][i]["mpi4jax_ms"] for p in probe if "mpi4jax_ms" in p["rows"][i])))
    return lines


def med(values):
    return statistics.median(values), min(values), max(values)


def size_label(n):
    return "%d MiB" % (n >> 20) if n >= (1 << 20) else "%d KiB" % (n >> 10)


def ratio_cell(values):
    m, lo, hi = med(values)
    return "%.2f" % m if len(values) == 1 else "%.2f (%.2f-%.2f)" % (m, lo, hi)


def collective_table(runs):
    rows0 = runs[0]["jax"]["collectives"]
    keys = [k for k, _ in COLUMNS if k + "_ms" in rows0[0]]
    head = ["size"] + [dict(COLUMNS)[k] + " ms" for k in keys]
    head += ["mpi4jax / tfring", "gloo / tfring", "raw / tfring", "raw / tfring donated"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for i, row in enumerate(rows0):
        per_run = [r["jax"]["collectives"][i] for r in runs]
        ms = {k: med([p[k + "_ms"] for p in per_run])[0] for k in keys}
        cells = [size_label(row["bytes"])] + ["%.3f" % ms[k] for k in keys]
        for anchor, mine in (("mpi4jax", "tfring"), ("gloo", "tfring"), ("raw", "tfring"),
                             ("raw", "tfring_donated")):
            cells.append(ratio_cell([p[anchor + "_ms"] / p[mine + "_ms"] for p in per_run])
                         if anchor + "_ms" in row else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def train_table(runs):
    lines = ["| loop | collective | step ms, uncompiled | step ms, jit_compile=True | uncompiled / compiled "
             "(> 1: compiled faster) |", "| --- | --- | --- | --- | --- |"]
    for mode, impl in TRAIN:
        def steps(jit):
            return [t["step_ms"] for r in runs for t in r["train"]
                    if (t["mode"], t["impl"], t["jit_compile"]) == (mode, impl, jit)]
        off, on = steps(False), steps(True)
        lines.append("| %s | %s | %s | %s | %s |" % (
            "Keras fit" if mode == "fit" else "custom (tape)", "none (no collective)" if impl == "none" else impl,
            " / ".join("%.1f" % v for v in off), " / ".join("%.1f" % v for v in on),
            ratio_cell([a / b for a, b in zip(off, on)])))
    return lines


def tables(data):
    runs = data["runs"]
    j = runs[0]["jax"]
    versions = "jax %s, mpi4jax %s, mpi4py %s, %s" % (j["jax"], j["mpi4jax"] or "(not importable)", j["mpi4py"],
                                                      j["mpi"].split(",")[0])
    n = len(runs)
    lines = [MARK, "", "## Inside compiled code: tfring.jax vs mpi4jax vs jax.distributed (gloo) vs raw MPI", "",
             "Runs of %s, np=2 on this machine (2 cores, shared memory / 127.0.0.1), %s; commits %s. Allreduce "
             "(sum) of float32 arrays per rank, all libraries in the same two processes, alternating per size "
             "(`benchmarks/jax_bench.py`); %s. Ratios: anchor ms / tfring ms (> 1: tfring faster), %s." % (
                 ", ".join(sorted({r["date"] for r in runs})), versions,
                 " / ".join(dict.fromkeys(r["git"]["commit"][:10] for r in runs)),
                 "medians of %d runs" % n if n > 1 else "one run",
                 "median (range over runs)" if n > 1 else "this run"), ""]
    lines += collective_table(runs)
    lines += ["", "Dense training step (`train_step.py`, 25.2 M params, batch 64 per rank, np=2), ms per step, "
              "each run's value (run 1 / run 2 ...):", ""]
    lines += train_table(runs)
    if data.get("cycle_probe"):
        lines += ["", "Small sizes against the core's cycle time (`--cycle-probe`, one job per setting, %s):" %
                  data["cycle_probe_date"], ""] + probe_table(data["cycle_probe"])
    return lines + ["", END]


def plot(data):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    runs = data["runs"]
    rows = runs[0]["jax"]["collectives"]
    sizes = [r["bytes"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label in COLUMNS:
        if key + "_ms" not in rows[0]:
            continue
        ms = [statistics.median(r["jax"]["collectives"][i][key + "_ms"] for r in runs) for i in range(len(rows))]
        ax.plot(sizes, [s / (m / 1000) / 1e9 for s, m in zip(sizes, ms)], marker="o", label=label,
                linestyle="--" if key.startswith(("raw", "jax_alone")) else "-")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bytes per rank (float32)")
    ax.set_ylabel("algorithm bandwidth, GB/s")
    ax.set_title("allreduce inside jax.jit, np=2, this machine (median of %d runs)" % len(runs))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=100)


def write_doc(lines):
    replace_block(DOC, lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--append", action="store_true", help="keep the runs already in the JSON file")
    parser.add_argument("--report-only", action="store_true", help="no run: tables and plot from the JSON file")
    parser.add_argument("--cycle-probe", action="store_true", help="only: tfring at cycle times 1 and 5 ms")
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()
    data = {"runs": []}
    if (args.append or args.report_only) and os.path.exists(RESULTS):
        with open(RESULTS) as f:
            data = json.load(f)
    if not args.report_only:
        with tempfile.TemporaryDirectory() as tmp:
            if args.cycle_probe:
                data["cycle_probe"] = cycle_probe(tmp)
                data["cycle_probe_date"] = datetime.date.today().isoformat()
            for _ in range(0 if args.cycle_probe else args.runs):
                data["runs"].append(one_run(len(data["runs"]), tmp))
                print("run %d done" % len(data["runs"]), flush=True)
        os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
        with open(RESULTS, "w") as f:
            json.dump(data, f, indent=1)
    lines = tables(data)
    print("\n".join(lines))
    plot(data)
    if not args.no_doc:
        write_doc(lines)


if __name__ == "__main__":
    main()
