"""tfring.torch vs torch.distributed (gloo) vs raw MPI, side by side in one run:

    PYTHONPATH=. .venv/bin/python benchmarks/torch_bench.py [--runs 3]     # ~3 min per run

Each run launches benchmarks/torch_job.py under tfringrun at np=2 (collectives 4 KiB - 64 MiB and a training
step) and at np=1 (the training step's baseline), one job after another, so drift on this noisy 2-core machine
hits every library alike. Writes benchmarks/results/torch_bench.json (every run), prints markdown tables (medians,
ranges), draws docs/torch_allreduce.png (if matplotlib imports) and puts the tables into docs/benchmarks-frameworks.md
between the lines `<!-- torch-bench -->` and `<!-- /torch-bench -->` (--no-doc: not)."""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from conftest import rank_env  # noqa: E402  - the tests' rank environment (one thread per rank, as root)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doc_block import replace_block  # noqa: E402

JOB = os.path.join(HERE, "torch_job.py")
RESULTS = os.path.join(HERE, "results", "torch_bench.json")
PLOT = os.path.join(ROOT, "docs", "torch_allreduce.png")
DOC = os.path.join(ROOT, "docs", "benchmarks-frameworks.md")
MARK, END = "<!-- torch-bench -->", "<!-- /torch-bench -->"


def launch(np_, port):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        # torch's CPU tensors come from malloc: with glibc's defaults a step's freshly allocated gradients and
        # activations page-fault (12-25 k faults per step here) depending on what the process freed before, which
        # made one library's step 1.7x slower than another's at np=1 for no reason of its own. Keeping freed
        # memory mapped makes every case fault-free, so the steps compare their collectives.
        env = dict(rank_env(), BENCH_PORT=str(port), PYTHONPATH=ROOT, MALLOC_MMAP_THRESHOLD_="1073741824",
                   MALLOC_TRIM_THRESHOLD_="4294967296")
        proc = subprocess.run([sys.executable, "-m", "tfring.runner", "-np", str(np_), sys.executable, JOB, out],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=1800)
        if proc.returncode != 0:
            sys.exit("np=%d failed:\n%s" % (np_, proc.stdout[-4000:]))
        with open(out) as f:
            return json.load(f)


def med(values):
    return statistics.median(values), min(values), max(values)


def size_label(n):
    return "%d MiB" % (n >> 20) if n >= (1 << 20) else "%d KiB" % (n >> 10)


def tables(runs):
    lines = [MARK, "", "## PyTorch: tfring.torch vs torch.distributed (gloo) vs raw MPI", "",
             "Run of %s, np=2 on this machine (2 cores, loopback/shared memory), torch %s, medians of %d runs "
             "(`benchmarks/torch_bench.py`). Allreduce of float32 tensors (sum); \"gloo / tfring\" > 1: tfring "
             "faster." % (runs[0]["date"], runs[0]["np2"]["torch"], len(runs)), "",
             "| size | raw mpi4py ms | gloo ms | tfring.torch ms | tfring in place ms | gloo / tfring | "
             "raw / tfring |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, row in enumerate(runs[0]["np2"]["collectives"]):
        get = {k: med([r["np2"]["collectives"][i][k] for r in runs])[0]
               for k in ("raw_ms", "gloo_ms", "tfring_ms", "tfring_inplace_ms")}
        best = min(get["tfring_ms"], get["tfring_inplace_ms"])
        lines.append("| %s | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |" % (
            size_label(row["bytes"]), get["raw_ms"], get["gloo_ms"], get["tfring_ms"], get["tfring_inplace_ms"],
            get["gloo_ms"] / best, get["raw_ms"] / best))
    lines += ["", "Training step, %d x Linear(2048, 2048) + ReLU (25.2 M params), batch 32 per rank, one thread "
              "per rank (ms per step; efficiency = np=1 step / np=2 step; \"vs plain\": the np=1 step of the same "
              "model and SGD with no wrapper, the one baseline for both libraries):" % 6, "",
              "| library | np=1 ms | np=2 ms | efficiency (range) | efficiency vs plain np=1 (range) |",
              "| --- | --- | --- | --- | --- |"]
    for key, name in (("plain_ms", "no collective (plain torch)"), ("ddp_ms", "DistributedDataParallel (gloo)"),
                      ("tfring_ms", "tfring.torch.DistributedOptimizer")):
        have = [r for r in runs if key in r["np1"]]
        if not have:
            continue
        one = med([r["np1"][key] for r in have])
        two = med([r["np2"][key] for r in have])
        eff = [r["np1"][key] / r["np2"][key] for r in have]
        plain = [r["np1"]["plain_ms"] / r["np2"][key] for r in have if "plain_ms" in r["np1"]]
        lines.append("| %s | %.1f | %.1f | %.2f (%.2f-%.2f) | %s |" % (
            name, one[0], two[0], statistics.median(eff), min(eff), max(eff),
            "%.2f (%.2f-%.2f)" % (statistics.median(plain), min(plain), max(plain)) if plain else ""))
    return lines + ["", END]


def plot(runs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = runs[0]["np2"]["collectives"]
    sizes = [r["bytes"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("raw_ms", "raw mpi4py"), ("gloo_ms", "torch.distributed gloo"),
                       ("tfring_ms", "tfring.torch")):
        ms = [statistics.median(r["np2"]["collectives"][i][key] for r in runs) for i in range(len(rows))]
        ax.plot(sizes, [s / (m / 1000) / 1e9 for s, m in zip(sizes, ms)], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("algorithm bandwidth, GB/s")
    ax.set_title("allreduce, np=2, this machine")
    ax.legend()
    fig.tight_layout()
    fig.savefig(PLOT, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()
    import datetime
    runs = []
    for i in range(args.runs):
        runs.append({"date": datetime.date.today().isoformat(), "np2": launch(2, 29511 + i),
                     "np1": launch(1, 29611 + i)})
        print("run %d done" % (i + 1), flush=True)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"machine": platform.node(), "cpus": os.cpu_count(), "runs": runs}, f, indent=1)
    lines = tables(runs)
    print("\n".join(lines))
    plot(runs)
    if not args.no_doc:
        replace_block(DOC, lines)


if __name__ == "__main__":
    main()
