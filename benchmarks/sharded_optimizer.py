"""The sharded optimizers (issue #46): per-rank memory and step time of Adam unsharded vs sharded on train_step.py's
dense model (25.2 M params: Adam's two moments are 2 x 100.8 MB), at np=2 and 3, all in one run: Keras fit on each
backend (tfring.keras.DistributedOptimizer), tfring.jax's optax and tfring.torch's optimizers, and torch's own
DDP + ZeroRedundancyOptimizer:

    .venv/bin/python benchmarks/sharded_optimizer.py [--backends jax,torch,tensorflow,optax,torch-binding,ddp]
        [--no-doc] [--name torch]

Each case is one launch of benchmarks/sharded_job.py (one after another, so drift hits every case alike). Writes
benchmarks/results/sharded_optimizer.json, prints the markdown table, draws docs/sharded_optimizer.png (if
matplotlib imports) and puts the table into docs/sharded-optimizer.md between `<!-- sharded -->` markers; with
--name N, a run of some backends only, into sharded_optimizer_N.json/.png and between `<!-- sharded_N -->` markers.
tfring.torch runs at stage 2 too (`sharded=2`, a row of its own against the same unsharded launch).
Memory: each rank's peak RSS after training minus before the first step (the optimizer state, the gradients and
the step's temporaries appear there), the median over ranks; "state" is what its optimizer variables hold."""
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
from doc_block import pyplot, replace_block  # noqa: E402
from tfring.runner.mpirun import huge_pages  # noqa: E402

DOC = os.path.join(ROOT, "docs", "sharded-optimizer.md")


def outputs(name):
    """(results JSON, plot, doc markers) of a run named `name` ("" for the full run)."""
    tail = "_" + name if name else ""
    return (os.path.join(HERE, "results", "sharded_optimizer%s.json" % tail),
            os.path.join(ROOT, "docs", "sharded_optimizer%s.png" % tail),
            ("<!-- sharded%s -->" % tail, "<!-- /sharded%s -->" % tail))


# What a row's "backend" names: a Keras backend (sharded_job.py), or a binding's own optimizer
# (sharded_bindings_job.py): optax = tfring.jax, torch-binding = tfring.torch, ddp = torch DDP with
# ZeroRedundancyOptimizer as the sharded case (torch's own anchor).
BINDINGS = {"optax": "optax", "torch-binding": "torch", "ddp": "ddp"}
LABELS = {"jax": "Keras on JAX", "torch": "Keras on torch", "tensorflow": "Keras on TensorFlow",
          "optax": "tfring.jax + optax", "torch-binding": "tfring.torch", "ddp": "torch DDP + ZeroRedundancyOptimizer"}


def launch(backend, np_, sharded, steps):
    out = tempfile.mktemp(suffix=".json")
    env = dict(os.environ, KERAS_BACKEND=backend, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1",
               GLIBC_TUNABLES=huge_pages(os.environ.get("GLIBC_TUNABLES")))  # what tfringrun gives its ranks
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    job = [os.path.join(HERE, "sharded_job.py")] if backend not in BINDINGS else \
        [os.path.join(HERE, "sharded_bindings_job.py"), "--flavour", BINDINGS[backend]]
    cmd = [mpirun, "-np", str(np_), "--oversubscribe", "--bind-to", "none", sys.executable] + job + [
        "--sharded", str(sharded), "--steps", str(steps), "--out", out]
    print("+ %s np=%d sharded=%d" % (LABELS.get(backend, backend), np_, sharded), flush=True)
    proc = subprocess.run(cmd, cwd=tempfile.gettempdir(), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=900)
    if not os.path.exists(out):
        print(proc.stdout[-3000:], flush=True)
        return {"backend": backend, "np": np_, "sharded": sharded, "error": proc.stdout.strip().splitlines()[-1]}
    with open(out) as f:
        r = json.load(f)
    os.remove(out)
    ranks = r["ranks"]
    r["backend"] = backend
    r.update(growth_mib=statistics.median(x["peak_after_mib"] - x["peak_before_mib"] for x in ranks),
             state_mib=statistics.median(x["optimizer_mib"] for x in ranks),
             step_s=max(x["step_s"] for x in ranks))
    print("   state %.1f MiB, peak RSS growth %.1f MiB, step %.3f s" % (r["state_mib"], r["growth_mib"], r["step_s"]),
          flush=True)
    return r


def median_row(runs):
    """One case's rounds as one row: the median of each number (the first round's other fields)."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    row = dict(ok[0], rounds=len(ok))
    for key in ("growth_mib", "state_mib", "step_s"):
        row[key] = statistics.median(r[key] for r in ok)
    return row


def table(rows, date, marks):
    by = {(r["backend"], r["np"], r["sharded"]): r for r in rows}
    lines = [marks[0], "", "Run of %s (`benchmarks/sharded_optimizer.py`): Keras fit on each backend, the bindings' "
             "own optimizers (a jitted optax step, a torch loop) and torch's DDP + ZeroRedundancyOptimizer; dense "
             "model (25.2 M params), Adam, batch 32 per rank, one compute thread per rank, 2 cores. Memory per rank "
             "(median over ranks): the optimizer variables' bytes and the peak RSS growth from before the first step "
             "to the end; step: the slowest rank's median (each the median of %d rounds of every case in turn)."
             % (date, max(r.get("rounds", 1) for r in rows)), "",
             "| backend | np | state unsharded MiB | state sharded MiB | RSS growth unsharded MiB | RSS growth sharded "
             "MiB | saved MiB | step unsharded s | step sharded s | sharded / unsharded step |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for backend in [b for b in LABELS if b in {r["backend"] for r in rows}]:
        for np_ in sorted({r["np"] for r in rows}):
            for stage in (1, 2):
                a, b = by.get((backend, np_, 0)), by.get((backend, np_, stage))
                label = LABELS[backend] + (" stage 2" if stage == 2 else "")
                if stage == 2 and not b:
                    continue
                if not a or not b or "error" in a or "error" in b:
                    lines.append("| %s | %d | failed: %s |" % (label, np_, (a or b or {}).get("error", "missing")))
                    continue
                lines.append("| %s | %d | %.1f | %.1f | %.0f | %.0f | %.0f | %.3f | %.3f | %.2fx |" % (
                    label, np_, a["state_mib"], b["state_mib"], a["growth_mib"], b["growth_mib"],
                    a["growth_mib"] - b["growth_mib"], a["step_s"], b["step_s"], b["step_s"] / a["step_s"]))
    return lines + ["", marks[1]]


def plot(rows, path):
    plt = pyplot()
    if plt is None:
        return
    ok = [r for r in rows if "error" not in r]
    labels = sorted({(r["backend"], r["np"]) for r in ok})
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, sharded in enumerate((0, 1, 2)):
        vals = [next((r["growth_mib"] for r in ok if (r["backend"], r["np"], r["sharded"]) == (b, n, sharded)), 0)
                for b, n in labels]
        if any(vals):
            ax.bar([j + 0.27 * i for j in range(len(labels))], vals, 0.27,
                   label=("unsharded", "sharded", "sharded stage 2")[sharded])
    ax.set_xticks([j + 0.27 for j in range(len(labels))], ["%s\nnp=%d" % (LABELS.get(b, b), n) for b, n in labels],
                  fontsize=7)
    ax.set_ylabel("peak RSS growth per rank (MiB)")
    ax.set_title("Adam on a 25.2 M-parameter model: memory per rank")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backends", default="jax,torch,tensorflow,optax,torch-binding,ddp")
    p.add_argument("--nps", default="2,3")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--no-doc", action="store_true")
    p.add_argument("--repeat", type=int, default=1, help="rounds of every case; each number is their median")
    p.add_argument("--name", default="", help="a run of some backends: its own JSON, plot and table")
    args = p.parse_args()
    results, plot_path, marks = outputs(args.name)
    cases = [(b, int(n), s) for b in args.backends.split(",") for n in args.nps.split(",")
             for s in ((0, 1, 2) if b == "torch-binding" else (0, 1))]
    # Rounds of every case in turn: a drift of the machine's speed (20 % within minutes here) hits every case.
    rounds = [[launch(b, n, s, args.steps) for b, n, s in cases] for _ in range(args.repeat)]
    rows = [median_row(list(runs)) for runs in zip(*rounds)]
    date = datetime.date.today().isoformat()
    os.makedirs(os.path.dirname(results), exist_ok=True)
    with open(results, "w") as f:
        json.dump({"date": date, "rows": rows}, f, indent=1)
    lines = table(rows, date, marks)
    print("\n".join(lines))
    plot(rows, plot_path)
    if not args.no_doc:
        replace_block(DOC, lines)


if __name__ == "__main__":
    main()
