"""Gradient compression (issue #46): tfring.torch.DistributedOptimizer's none/fp16/bf16/PowerSGD next to torch DDP's
communication hooks (none, bf16, PowerSGD) in one run at np=2: step time on the dense-25M model, elements and bytes
each step sends, digits test accuracy after the same epochs.

    .venv/bin/python benchmarks/compression.py [--np 2] [--no-doc]
    .venv/bin/python benchmarks/compression.py --rate 1gbit    # 2 emulated hosts, one rank each (root needed)
    .venv/bin/python benchmarks/compression.py [--rate R] --report    # re-render the docs from the saved JSON

One launch of benchmarks/compression_job.py under tfringrun: on this machine (loopback), or with --rate on two
emulated hosts (tests/hosts/hosts.py: network namespaces, each host's link limited with tbf in both directions;
gloo and MPI bound to the hosts' interface). Writes benchmarks/results/compression[_RATE].json, prints the markdown
table, draws docs/compression[_RATE].png (if matplotlib imports) and puts the table into docs/compression.md between
`<!-- compression[-RATE] -->` markers."""
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

DOC = os.path.join(ROOT, "docs", "compression.md")
HOSTS_PY = os.path.join(ROOT, "tests", "hosts", "hosts.py")
NETNS = {"NETNS_HOSTS_PREFIX": "tfrc", "NETNS_HOSTS_SUBNET": "10.235.0"}


def names(rate):
    """(results JSON, plot, opening marker, closing marker) of a run on loopback (rate None) or at a link rate."""
    tail = "" if rate is None else "_" + rate
    mark = "compression" + ("" if rate is None else "-" + rate)
    return (os.path.join(HERE, "results", "compression%s.json" % tail),
            os.path.join(ROOT, "docs", "compression%s.png" % tail), "<!-- %s -->" % mark, "<!-- /%s -->" % mark)


def label(r):
    return "%s %s%s" % (r["library"], r["compression"], " r=%d" % r["rank"] if r["compression"] == "powersgd" else "")


def table(result, date, rate):
    rows = result["rows"]
    base = {r["library"]: r for r in rows if r["compression"] == "none"}
    where = "on one machine (loopback, 2 cores)" if rate is None else \
        "on 2 emulated hosts, one rank each, links limited to %s (both sharing this machine's 2 cores)" % rate
    lines = [names(rate)[2], "", "Run of %s (`benchmarks/compression.py%s`), np=%d %s, torch %s. "
             "Step: the dense-25M model (6 x 2048 x 2048), batch 32 per rank, SGD, slowest rank's median after the "
             "%d warm-up steps. Digits: a 64-256-256-10 MLP, SGD(0.05, momentum 0.9), batch 32 per rank, %d epochs, "
             "test accuracy on the held-out 20 %%." % (date, "" if rate is None else " --rate " + rate, result["np"],
                                                         where, result["torch"], result["warmup_steps"],
                                                         result["epochs"]), "",
             "| case | elements / step | MB / step | vs none | step ms | step vs none | digits accuracy |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        b = base[r["library"]]
        lines.append("| %s | %d | %.2f | %.3fx | %.1f | %.2fx | %.4f |" % (
            label(r), r["elements"], r["bytes"] / 1e6, r["bytes"] / b["bytes"], r["step_ms"],
            r["step_ms"] / b["step_ms"], r["digits_accuracy"]))
    return lines + ["", names(rate)[3]]


def plot(result, rate):
    plt = pyplot()
    if plt is None:
        return
    rows = result["rows"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    labels = [label(r) for r in rows]
    a1.barh(labels, [r["bytes"] / 1e6 for r in rows])
    a1.set_xscale("log")
    a1.set_xlabel("MB sent per step (dense-25M)")
    a2.barh(labels, [r["step_ms"] for r in rows])
    a2.set_xlabel("step ms (np=%d, %s)" % (result["np"], "loopback" if rate is None else "2 hosts at " + rate))
    a2.set_yticks([])
    fig.tight_layout()
    fig.savefig(names(rate)[1], dpi=100)


def launch(args, out):
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2")
    job = [sys.executable, os.path.join(HERE, "compression_job.py"), out]
    if args.rate is None:
        tfringrun = os.path.join(os.path.dirname(sys.executable), "tfringrun")
        subprocess.run([tfringrun, "-np", str(args.np)] + job, cwd=tempfile.gettempdir(), env=env, check=True,
                       timeout=1800)
        return
    if os.geteuid() != 0:
        sys.exit("compression.py --rate: emulated hosts need root (network namespaces and tc)")
    hosts = lambda *a, check=True: subprocess.run([sys.executable, HOSTS_PY] + list(a), env=dict(  # noqa: E731
        os.environ, **NETNS), check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    hosts("down", check=False)
    hosts("up", str(args.np))
    tmp = tempfile.mkdtemp()
    os.symlink(os.path.join(ROOT, "tests", "hosts", "ssh"), os.path.join(tmp, "ssh"))
    try:
        for i in range(1, args.np + 1):
            hosts("rate", "h%d" % i, args.rate)
        # gloo's rendezvous on h1, both libraries on the hosts' interface; waiting ranks yield (2 cores for all).
        env.update(NETNS, PATH=tmp + os.pathsep + env["PATH"], MASTER_ADDR=NETNS["NETNS_HOSTS_SUBNET"] + ".11",
                   GLOO_SOCKET_IFNAME="eth0", OMPI_MCA_mpi_yield_when_idle="1")
        subprocess.run([sys.executable, HOSTS_PY, "exec", "h1", sys.executable, "-m", "tfring.runner", "-np",
                        str(args.np), "-H", ",".join("h%d:1" % i for i in range(1, args.np + 1)),
                        "--network-interface", NETNS["NETNS_HOSTS_SUBNET"] + ".0/24"] + job,
                       cwd=tmp, env=env, check=True, timeout=3600)
    finally:
        hosts("down", check=False)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--rate", help="e.g. 1gbit: run on emulated hosts with links limited to this")
    p.add_argument("--no-doc", action="store_true")
    p.add_argument("--report", action="store_true", help="only render the table and plot from the saved JSON")
    args = p.parse_args()
    results = names(args.rate)[0]
    if args.report:
        with open(results) as f:
            result = json.load(f)
    else:
        out = os.path.join(tempfile.mkdtemp(), "result.json")
        launch(args, out)
        with open(out) as f:
            result = json.load(f)
        os.remove(out)
        result["date"] = datetime.date.today().isoformat()
        os.makedirs(os.path.dirname(results), exist_ok=True)
        with open(results, "w") as f:
            json.dump(result, f, indent=1)
    lines = table(result, result["date"], args.rate)
    print("\n".join(lines))
    plot(result, args.rate)
    if not args.no_doc:
        replace_block(DOC, lines)


if __name__ == "__main__":
    main()
