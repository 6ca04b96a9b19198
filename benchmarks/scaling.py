"""Flat vs hierarchical allreduce on emulated hosts with rate-limited links, in one command (root needed):

    python benchmarks/scaling.py            # ~10 min; writes docs/scaling.json, docs/scaling.png
                                            # and the generated part of docs/scaling.md
    python benchmarks/scaling.py --report   # only re-render docs from scaling.json

Hosts are network namespaces on one bridge (tests/hosts/hosts.py); every host's link is limited with tbf in both
directions. Each configuration runs benchmarks/scaling_job.py on H hosts x G ranks through tfringrun (launched on
h1, ranks on the other hosts through the harness's ssh stand-in), measuring raw mpi4py and tfring side by side in
the same processes. Traffic stays inside the namespaces."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import cost_model

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HOSTS_PY = os.path.join(ROOT, "tests", "hosts", "hosts.py")
RESULTS = os.path.join(ROOT, "docs", "scaling.json")  # kept with the doc: cost_model.py --fit reads it
DOC = os.path.join(ROOT, "docs", "scaling.md")
PLOT = os.path.join(ROOT, "docs", "scaling.png")
NETNS = {"NETNS_HOSTS_PREFIX": "tfrb", "NETNS_HOSTS_SUBNET": "10.234.0"}
# (hosts, ranks per host, link rate): the 2 hosts x 2 and 4 hosts x 1-2 (4 x 2 = 8 ranks on 2 cores).
CONFIGS = [(2, 2, "1gbit"), (2, 2, "10gbit"), (4, 1, "1gbit"), (4, 2, "1gbit")]
BEGIN, END = "<!-- scaling.py: begin -->", "<!-- scaling.py: end -->"


def hosts_cmd(*args, check=True):
    return subprocess.run([sys.executable, HOSTS_PY] + list(args), env=dict(os.environ, **NETNS), check=check,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def resnet_shapes(path):
    code = ("import json, keras; json.dump([list(v.shape) for v in "
            "keras.applications.ResNet50(weights=None).trainable_variables], open(%r, 'w'))" % path)
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


def parse_configs(text):
    """'2x2@1gbit,4x1@10gbit' -> [(2, 2, '1gbit'), (4, 1, '10gbit')]"""
    out = []
    for item in text.split(","):
        shape, rate = item.split("@")
        h, g = map(int, shape.split("x"))
        out.append((h, g, rate))
    return out


def run_config(hosts, per_host, rate, shapes, tmp, args):
    """One configuration's job (rank 0 writes its JSON into `tmp`, which also holds the ssh stand-in)."""
    for i in range(1, 5):
        hosts_cmd("rate", "h%d" % i, rate)
    out = os.path.join(tmp, "result.json")
    env = dict(os.environ, **NETNS)
    # All emulated hosts share this machine's 2 cores: waiting ranks must yield, not spin (Open MPI only does
    # that by itself when it knows a host is oversubscribed).
    env.update(PATH=tmp + os.pathsep + env["PATH"], TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1",
               OMPI_MCA_mpi_yield_when_idle="1")
    cmd = [sys.executable, HOSTS_PY, "exec", "h1", sys.executable, "-m", "tfring.runner",
           "-np", str(hosts * per_host), "-H", ",".join("h%d:%d" % (i, per_host) for i in range(1, hosts + 1)),
           "--network-interface", NETNS["NETNS_HOSTS_SUBNET"] + ".0/24", "python",
           os.path.join(HERE, "scaling_job.py"), "--out", out, "--shapes", shapes, "--iters", str(args.iters),
           "--sizes-mib", args.sizes_mib]
    label = "%dx%d@%s" % (hosts, per_host, rate)
    print("+", label, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=args.timeout)
    if proc.returncode != 0 or not os.path.exists(out):
        sys.exit("scaling job %s failed:\n%s" % (label, proc.stdout[-5000:]))
    with open(out) as f:
        result = json.load(f)
    os.remove(out)
    result.update(label=label, rate=rate, drops=link_drops(hosts))
    return result


def link_drops(hosts):
    """Packets the rate limiters dropped during the configuration (TCP retransmits them: slow, noisy points)."""
    total = 0
    for i in range(1, hosts + 1):
        for ns, dev in (("%s-h%d" % (NETNS["NETNS_HOSTS_PREFIX"], i), "eth0"),
                        (NETNS["NETNS_HOSTS_PREFIX"] + "-br", "p-h%d" % i)):
            out = subprocess.run(["tc", "-s", "-n", ns, "qdisc", "show", "dev", dev], stdout=subprocess.PIPE,
                                 text=True).stdout
            total += sum(int(n) for n in re.findall(r"dropped (\d+)", out))
    return total


def measure(args):
    if os.geteuid() != 0:
        sys.exit("scaling.py: emulated hosts need root (network namespaces and tc)")
    hosts_cmd("down", check=False)
    hosts_cmd("up", "4")
    tmp = tempfile.mkdtemp()
    os.symlink(os.path.join(ROOT, "tests", "hosts", "ssh"), os.path.join(tmp, "ssh"))
    shapes = os.path.join(tmp, "resnet50_shapes.json")
    resnet_shapes(shapes)
    try:
        configs = [run_config(h, g, r, shapes, tmp, args) for h, g, r in parse_configs(args.configs)]
    finally:
        hosts_cmd("down", check=False)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"configs": configs}, f, indent=1)


def model_rows(config):
    links = cost_model.fit_probes(config["probes"])
    out = []
    for row in config["rows"]:
        pred = {k: cost_model.allreduce_ms(row["bytes"], config["hosts"], config["per_host"], links, k == "hier")
                for k in ("flat", "hier")}
        out.append((row, pred))
    return links, out


def fmt(x):
    return "%.1f" % x if x >= 10 else "%.2f" % x


def report_md(configs):
    md = [BEGIN, "", "Generated by `python benchmarks/scaling.py` (medians in ms; the slowest rank's median per "
          "call; one run, side by side in the same processes). Speed-up = tfring flat / tfring hierarchical.", ""]
    for c in configs:
        links, rows = model_rows(c)
        md += ["### %d hosts x %d ranks, links at %s" % (c["hosts"], c["per_host"], c["rate"]), "",
               "| case | raw flat | raw hierarchical | tfring flat | tfring hierarchical | speed-up | "
               "tfring hier / raw hier | model flat (err) | model hier (err) |", "|" + "---|" * 9]
        for row, pred in rows:
            errs = ["%s (%+.0f%%)" % (fmt(pred[k]), 100 * (pred[k] - row[k + "_ms"]) / row[k + "_ms"])
                    for k in ("flat", "hier")]
            md.append("| %s | %s | %s | %s | %s | %.2fx | %.2f | %s | %s |" % (
                row["case"], fmt(row["raw_ms"]), fmt(row["raw_hier_ms"]), fmt(row["flat_ms"]), fmt(row["hier_ms"]),
                row["flat_ms"] / row["hier_ms"], row["hier_ms"] / row["raw_hier_ms"], errs[0], errs[1]))
        fitted = ", ".join("%s: alpha %.3f ms, %.2f Gbit/s" % (k, v[0], 8e-6 / v[1]) for k, v in links.items() if v)
        md += ["", "Fitted links (ping-pong probes): %s. Packets dropped by the rate limiters: %d." % (
            fitted, c.get("drops", -1)), ""]
    md += ["![flat vs hierarchical](scaling.png)", "", END]
    return "\n".join(md)


def plot(configs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(configs), figsize=(4.2 * len(configs), 3.6), squeeze=False)
    for ax, c in zip(axes[0], configs):
        rows = [r for r in c["rows"] if r["case"].startswith("allreduce")]
        mib = [r["bytes"] / 2**20 for r in rows]
        _, modelled = model_rows(c)
        for key, style, name in (("raw", "k--", "raw mpi4py flat"), ("raw_hier", "k:", "raw hierarchical"),
                                 ("flat", "C0o-", "tfring flat"), ("hier", "C1s-", "tfring hierarchical")):
            ax.plot(mib, [r[key + "_ms"] for r in rows], style, label=name)
        ax.plot(mib, [p["hier"] for r, p in modelled if r in rows], "C1x", alpha=0.6, label="model hierarchical")
        ax.plot(mib, [p["flat"] for r, p in modelled if r in rows], "C0x", alpha=0.6, label="model flat")
        ax.set(xscale="log", yscale="log", xlabel="allreduce MiB", ylabel="ms", title=c["label"])
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def report():
    with open(RESULTS) as f:
        configs = json.load(f)["configs"]
    with open(DOC) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        sys.exit("%s: markers %s ... %s missing" % (DOC, BEGIN, END))
    doc = doc[:doc.index(BEGIN)] + report_md(configs) + doc[doc.index(END) + len(END):]
    with open(DOC, "w") as f:
        f.write(doc)
    plot(configs)
    print("wrote %s and %s" % (DOC, PLOT))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--report", action="store_true", help="only re-render docs/scaling.md and the plot")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--configs", default=",".join("%dx%d@%s" % c for c in CONFIGS), help="HOSTSxRANKS@RATE,...")
    p.add_argument("--sizes-mib", default="1,4,16,64")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per configuration")
    args = p.parse_args()
    if not args.report:
        measure(args)
    report()


if __name__ == "__main__":
    main()
