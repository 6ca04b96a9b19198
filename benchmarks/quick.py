"""`run_all.py --quick` (issue #30 item 5): one short run (about 5 minutes here) that prints issue #30's ratios and
goals, so a regression shows before it lands: the collective suite once (tfring, and Horovod when its environment
is given), then the dense-25M training step for 10 steps (tape: no collective and tfring; Keras fit: tfring; np=1
on one core vs np=2). A ratio is raw MPI's time / the library's (1 = as fast as raw MPI), or the library's scaling
efficiency / the no-collective loop's (1 = the machine's ceiling). One run on a noisy 2-core machine: read a miss
against docs/benchmarks.md's full runs before believing it."""
import os

GOALS = [  # (what, case prefix, the library's column, goal, higher is better)
    ("allreduce 4 KiB, tf.function: ms", "allreduce 4KiB", "function", 0.15, False),
    ("allreduce 64 KiB eager: x raw", "allreduce 64KiB", "eager", 0.8, True),
    ("allreduce 1 MiB eager: x raw", "allreduce 1MiB", "eager", 0.8, True),
    ("allreduce 16 MiB eager: x raw", "allreduce 16MiB", "eager", 0.8, True),
    ("allreduce 64 MiB eager: x raw", "allreduce 64MiB", "eager", 0.8, True),
    ("ResNet-50 set, DistributedGradientTape: raw / tape", "ResNet-50", "tape", 1 / 1.3, True),
    ("broadcast 64 MiB: x raw", "broadcast", "eager", 0.8, True),
    ("allgather 16 MiB: x raw", "allgather", "eager", 0.8, True),
]


def _value(row, impl, mode, absolute):
    key = "%s_%s_ms" % (impl, mode)
    if key not in row:
        return None
    return row[key] if absolute else row["raw_ms"] / row[key]


def ratios_md(suite, train, impls):
    """The quick run's table: each goal of issue #30, tfring's value (and Horovod's), met or missed."""
    head = ["measure", "goal", "tfring"] + (["Horovod"] if "horovod" in impls else []) + ["met"]
    lines = ["## Quick run: issue #30's ratios (one run, np=2)\n", "| " + " | ".join(head) + " |",
             "|" + " --- |" * len(head)]
    for what, prefix, mode, goal, higher in GOALS:
        row = next((r for r in suite if r["case"].startswith(prefix)), None)
        if row is None:
            continue
        values = [_value(row, impl, mode, not higher) for impl in impls]
        met = values[0] is not None and (values[0] >= goal if higher else values[0] <= goal)
        cells = [what, "%s %.2f" % (">=" if higher else "<=", goal)]
        cells += ["-" if v is None else "%.3f" % v for v in values] + ["yes" if met else "**no**"]
        lines.append("| " + " | ".join(cells) + " |")
    ceiling = next((r["efficiency"] for r in train if r["impl"] == "none"), None)
    for r in train:
        if r["impl"] == "none" or ceiling is None:
            continue
        ratio = r["efficiency"] / ceiling
        cells = ["training step, %s: efficiency / the no-collective loop's (%.2f / %.2f)" % (
            "Keras fit" if r["mode"] == "fit" else "tape", r["efficiency"], ceiling), ">= 0.95", "%.3f" % ratio]
        cells += ["-"] if "horovod" in impls else []
        lines.append("| " + " | ".join(cells + ["yes" if ratio >= 0.95 else "**no**"]) + " |")
    return lines + [""]


def run(args, impls, job, median_rows):
    """The quick run: returns (summary dict, markdown lines)."""
    shapes = os.path.join(args.out, "resnet50_shapes.json")
    suite = []
    for impl in impls:
        rows = job(2, "suite.py", os.path.join(args.out, "quick_suite_%s.json" % impl), "--impl", impl,
                   "--shapes", shapes, impl=impl, horovod_python=args.horovod_python)["rows"]
        if not suite:
            suite = [{"case": r["case"], "bytes": r["bytes"], "raw_ms": r["raw_ms"]} for r in rows]
        for s, r in zip(suite, rows):
            s.update({"%s_%s" % (impl, k): v for k, v in r.items() if k.endswith("_ms") and not k.startswith("raw")})
    train = []
    for mode, impl in (("tape", "none"), ("tape", "tfring"), ("fit", "tfring")):
        sps = {}
        for np_ in (1, 2):
            out = os.path.join(args.out, "quick_train_%s_%s_np%d.json" % (mode, impl, np_))
            sps[np_] = job(np_, "train_step.py", out, "--impl", impl, "--mode", mode, "--steps", "10",
                           *(["--one-core"] if np_ == 1 else []))["samples_per_sec"]
        train.append({"mode": mode, "impl": impl, "efficiency": sps[2] / (2 * sps[1])})
    return {"suite": suite, "train": train}, ratios_md(suite, train, impls)
