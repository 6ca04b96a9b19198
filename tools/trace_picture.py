"""Draws a tfring timeline (Chrome-trace JSON, a process per rank) as a picture: one row per rank, its
negotiation spans (from its own submission to the decision: long ones are waits for a later rank) and its
transfers, over a time window. Used for docs/observability.md's picture; a quick look without Perfetto.

    python tools/trace_picture.py timeline.json docs/merged_trace.png [--from-ms 2000 --span-ms 400]
"""
import argparse
import json
from collections import defaultdict


def spans(events):
    """{(pid, name): [(start_us, end_us), ...]} from B/E pairs per (pid, tid)."""
    open_, out = defaultdict(list), defaultdict(list)
    for e in sorted((e for e in events if e.get("ph") in ("B", "E")), key=lambda e: e["ts"]):
        key = (e["pid"], e["tid"])
        if e["ph"] == "B":
            open_[key].append((e["name"], e["ts"]))
        elif open_[key]:
            name, start = open_[key].pop()
            out[(e["pid"], name)].append((start, e["ts"]))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("png")
    p.add_argument("--from-ms", type=float, default=None, help="window start (default: the middle of the trace)")
    p.add_argument("--span-ms", type=float, default=400)
    args = p.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(args.trace) as f:
        events = json.load(f)
    s = spans(events)
    ranks = sorted({pid for pid, _ in s})
    start = min(a for v in s.values() for a, _ in v)
    end = max(e for v in s.values() for _, e in v)
    t0 = args.from_ms * 1000 if args.from_ms is not None else (start + end) / 2
    t1 = t0 + args.span_ms * 1000
    colors = {"NEGOTIATE": "#f2b134", "MPI": "#2a7ab0", "MEMCPY": "#7fbf7f"}
    fig, ax = plt.subplots(figsize=(10, 1 + 0.8 * len(ranks)))
    for row, rank in enumerate(ranks):
        for (pid, name), items in s.items():
            if pid != rank:
                continue
            kind = next((k for k in colors if name.startswith(k)), None)
            if kind is None:
                continue
            bars = [((a - t0) / 1000, (b - a) / 1000) for a, b in items if b >= t0 and a <= t1]
            y = (row - 0.35, 0.3) if kind == "NEGOTIATE" else (row + 0.05, 0.3)
            ax.broken_barh(bars, y, facecolors=colors[kind], alpha=0.6 if kind == "NEGOTIATE" else 1.0)
    ax.set_yticks(range(len(ranks)), ["rank %d" % r for r in ranks])
    ax.set_xlim(0, args.span_ms)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, ["negotiation (submitted, waiting for every rank)", "MPI transfer", "fusion copies"],
              loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize=8)
    ax.set_title("tfring timeline, every rank (aligned clocks)")
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
