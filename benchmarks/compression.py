"""Gradient compression (issue #46): tfring.torch.DistributedOptimizer's none/fp16/bf16/PowerSGD next to torch DDP's
communication hooks (none, bf16, PowerSGD) in one run at np=2: step time on the dense-25M model, elements and bytes
each step sends, digits test accuracy after the same epochs.

    .venv/bin/python benchmarks/compression.py [--np 2] [--no-doc]

One launch of benchmarks/compression_job.py under tfringrun. Writes benchmarks/results/compression.json, prints the
markdown table, draws docs/compression.png (if matplotlib imports) and puts the table into docs/compression.md
between `<!-- compression -->` markers."""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from doc_block import pyplot, replace_block  # noqa: E402

RESULTS = os.path.join(HERE, "results", "compression.json")
DOC, PLOT = os.path.join(ROOT, "docs", "compression.md"), os.path.join(ROOT, "docs", "compression.png")
MARK, END = "<!-- compression -->", "<!-- /compression -->"


def label(r):
    return "%s %s%s" % (r["library"], r["compression"], " r=%d" % r["rank"] if r["compression"] == "powersgd" else "")


def table(result, date):
    rows = result["rows"]
    base = {r["library"]: r for r in rows if r["compression"] == "none"}
    lines = [MARK, "", "Run of %s (`benchmarks/compression.py`), np=%d on one machine (loopback, 2 cores), torch %s. "
             "Step: the dense-25M model (6 x 2048 x 2048), batch 32 per rank, SGD, slowest rank's median after the "
             "%d warm-up steps. Digits: a 64-256-256-10 MLP, SGD(0.05, momentum 0.9), batch 32 per rank, %d epochs, "
             "test accuracy on the held-out 20 %%." % (date, result["np"], result["torch"], result["warmup_steps"],
                                                         result["epochs"]), "",
             "| case | elements / step | MB / step | vs none | step ms | step vs none | digits accuracy |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        b = base[r["library"]]
        lines.append("| %s | %d | %.2f | %.3fx | %.1f | %.2fx | %.4f |" % (
            label(r), r["elements"], r["bytes"] / 1e6, r["bytes"] / b["bytes"], r["step_ms"],
            r["step_ms"] / b["step_ms"], r["digits_accuracy"]))
    return lines + ["", END]


def plot(result):
    plt = pyplot()
    if plt is None:
        return
    rows = result["rows"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    names = [label(r) for r in rows]
    a1.barh(names, [r["bytes"] / 1e6 for r in rows])
    a1.set_xscale("log")
    a1.set_xlabel("MB sent per step (dense-25M)")
    a2.barh(names, [r["step_ms"] for r in rows])
    a2.set_xlabel("step ms (np=%d, loopback)" % result["np"])
    a2.set_yticks([])
    fig.tight_layout()
    fig.savefig(PLOT, dpi=100)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--no-doc", action="store_true")
    args = p.parse_args()
    out = tempfile.mktemp(suffix=".json")
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2")
    tfringrun = os.path.join(os.path.dirname(sys.executable), "tfringrun")
    subprocess.run([tfringrun, "-np", str(args.np), sys.executable, os.path.join(HERE, "compression_job.py"), out],
                   cwd=tempfile.gettempdir(), env=env, check=True, timeout=1800)
    with open(out) as f:
        result = json.load(f)
    os.remove(out)
    date = datetime.date.today().isoformat()
    result["date"] = date
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(result, f, indent=1)
    lines = table(result, date)
    print("\n".join(lines))
    plot(result)
    if not args.no_doc:
        replace_block(DOC, lines)


if __name__ == "__main__":
    main()
