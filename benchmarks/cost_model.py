"""Alpha-beta cost model of allreduce, flat ring vs hierarchical, fitted from measured point-to-point times.

A message of m bytes over a link class costs alpha + m * beta (alpha: latency in ms, beta: ms per byte). Two
classes: shared memory within a host ("shm") and the host's network link ("cross"). With H hosts of G ranks
(N = H * G) and S gradient bytes:
  flat ring   2 (N-1) steps of S/N bytes; every step waits for the slowest hop, a cross-host one when H > 1:
              T = 2 (N-1) alpha_x + 2 (N-1)/N S beta_x
  hierarchical (reduce-scatter in the host, shards across hosts in parallel, allgather in the host):
              T = 2 (G-1) alpha_s + 2 (G-1)/G S beta_s + 2 (H-1) alpha_x + 2 (H-1)/H S beta_x
Step time = compute + the part of communication that backprop does not hide (overlap in [0, 1] of the compute);
scaling efficiency = compute / step. What it leaves out: reduction arithmetic (CPU time per byte), link sharing
by several flows, MPI's own algorithm choice (Open MPI does not always run a ring), and TCP's slow start.

    python benchmarks/cost_model.py --fit docs/scaling.json --config 2x2@1gbit \\
        --hosts 32 --per-host 4 --grad-mb 178 --compute-ms 490 --overlap 0.5
"""
import argparse
import json

import numpy as np


def fit_link(points):
    """(alpha_ms, beta_ms_per_byte) by least squares over [(bytes, ms)], both kept >= 0."""
    m = np.array([p[0] for p in points], float)
    t = np.array([p[1] for p in points], float)
    beta, alpha = np.polyfit(m, t, 1)
    return max(alpha, 0.0), max(beta, 1e-15)


def fit_probes(probes):
    """Link classes from scaling_job.py's ping-pong probes; a class with no probe (one rank per host) is None."""
    out = {}
    for cls in ("shm", "cross"):
        pts = [(p["bytes"], p[cls + "_ms"]) for p in probes if p[cls + "_ms"] >= 0]
        out[cls] = fit_link(pts) if len(pts) >= 2 else None
    return out


def allreduce_ms(nbytes, hosts, per_host, links, hierarchical):
    """Predicted allreduce time (ms) of nbytes on hosts x per_host ranks; links: {"shm": (a, b), "cross": (a, b)}."""
    n = hosts * per_host
    if n == 1:
        return 0.0
    shm, cross = links.get("shm"), links.get("cross")
    if hosts == 1:
        a, b = shm
        return 2 * (n - 1) * a + 2 * (n - 1) / n * nbytes * b
    ax, bx = cross
    if not hierarchical or per_host == 1:
        return 2 * (n - 1) * ax + 2 * (n - 1) / n * nbytes * bx
    a_s, b_s = shm
    return (2 * (per_host - 1) * a_s + 2 * (per_host - 1) / per_host * nbytes * b_s + 2 * (hosts - 1) * ax +
            2 * (hosts - 1) / hosts * nbytes * bx)


def step(compute_ms, comm_ms, overlap):
    """(step ms, scaling efficiency): communication hidden behind `overlap` of the compute time."""
    exposed = max(0.0, comm_ms - overlap * compute_ms)
    return compute_ms + exposed, compute_ms / (compute_ms + exposed)


def overlap_needed(compute_ms, comm_ms, efficiency):
    """The overlap fraction a job needs to reach `efficiency` (> 1: unreachable by overlap alone)."""
    exposed = compute_ms / efficiency - compute_ms
    return max(0.0, (comm_ms - exposed) / compute_ms)


def links_for(args, fitted):
    links = dict(fitted)
    if args.link_gbit:
        links["cross"] = (args.latency_us / 1000.0, 8.0 / (args.link_gbit * 1e9) * 1000.0)
    if args.shm_gbyte:
        links["shm"] = (links["shm"][0] if links.get("shm") else 0.001, 1.0 / (args.shm_gbyte * 1e9) * 1000.0)
    return links


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fit", help="scaling.json from benchmarks/scaling.py (link classes from its probes)")
    p.add_argument("--config", help="which measured configuration's probes, e.g. 2x2@1gbit")
    p.add_argument("--hosts", type=int, required=True)
    p.add_argument("--per-host", type=int, required=True)
    p.add_argument("--grad-mb", type=float, required=True, help="gradient bytes per step, MB (1e6)")
    p.add_argument("--compute-ms", type=float, required=True, help="forward+backward time of one step")
    p.add_argument("--overlap", type=float, default=0.0, help="fraction of compute that hides communication")
    p.add_argument("--link-gbit", type=float, help="cross-host link instead of the fitted one (Gbit/s)")
    p.add_argument("--latency-us", type=float, default=50.0, help="with --link-gbit: per-message latency")
    p.add_argument("--shm-gbyte", type=float, help="within-host bandwidth instead of the fitted one (GB/s)")
    args = p.parse_args()
    fitted = {}
    if args.fit:
        with open(args.fit) as f:
            configs = json.load(f)["configs"]
        chosen = [c for c in configs if c["label"] == args.config] if args.config else configs[:1]
        if not chosen:
            p.error("--config %s: not in %s (%s)" % (args.config, args.fit, ", ".join(c["label"] for c in configs)))
        fitted = fit_probes(chosen[0]["probes"])
    links = links_for(args, fitted)
    nbytes = args.grad_mb * 1e6
    for hier in (False, True):
        comm = allreduce_ms(nbytes, args.hosts, args.per_host, links, hier)
        t, eff = step(args.compute_ms, comm, args.overlap)
        print("%-12s allreduce %8.1f ms  step %8.1f ms  efficiency %.3f  overlap for 0.90: %.2f" % (
            "hierarchical" if hier else "flat", comm, t, eff, overlap_needed(args.compute_ms, comm, 0.9)))


if __name__ == "__main__":
    main()
