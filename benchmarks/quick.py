"""`run_all.py --quick` (issue #30 item 5): one short run (about 8 minutes here) that prints issue #30's ratios and
goals, so a regression shows before it lands: the collective suite once (tfring, and Horovod when its environment
is given), then the dense-25M training step for 10 steps (tape: no collective and tfring; Keras fit: tfring; np=1
on one core vs np=2), then issue #47's Keras ratios: Keras fit on each backend, tfring's efficiency over the
no-collective fit's (keras_backends.py's jobs, 10 steps), and under keras-nightly (when
build_keras_nightly_env.sh made it) tfring's step against keras.distribution.DataParallel's on torch. A ratio is
raw MPI's time / the library's (1 = as fast as raw MPI), or the library's scaling
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


KERAS_GOAL = 0.9  # issue #47 item 1: of the no-collective ceiling, where overlap is possible


def keras_ratios(out, backends=("tensorflow", "jax", "torch"), nightly=True):
    """Issue #47 items 1 and 3, one job per case: [(measure, goal, value, met)]."""
    import keras_backends as kb
    rows = []
    for backend in backends:
        sps = {}
        for impl in ("none", "tfring"):
            for np_ in (1, 2):
                r = kb.launch(backend, impl, np_, 10, os.path.join(out, "quick_keras_%s_%s_np%d.json" % (
                    backend, impl, np_)))
                sps[impl, np_] = r.get("samples_per_sec")
        if None in sps.values():
            rows.append(("Keras fit on %s: efficiency / the no-collective fit's" % backend, KERAS_GOAL, None, False))
            continue
        eff = {impl: sps[impl, 2] / (2 * sps[impl, 1]) for impl in ("none", "tfring")}
        ratio = eff["tfring"] / eff["none"]
        rows.append(("Keras fit on %s: efficiency / the no-collective fit's (%.2f / %.2f)" % (
            backend, eff["tfring"], eff["none"]), KERAS_GOAL, ratio, ratio >= KERAS_GOAL))
    if nightly and os.path.exists(kb.NIGHTLY_PYTHON):
        ms = {impl: kb.launch("torch-nightly", impl, 2, 10, os.path.join(out, "quick_keras_nightly_%s.json" % impl))
              .get("step_ms") for impl in ("tfring", "keras_dp")}
        ratio = ms["keras_dp"] / ms["tfring"] if None not in ms.values() else None
        rows.append(("keras-nightly on torch: DataParallel's step / tfring's", 1.0, ratio,
                     ratio is not None and ratio >= 1.0))
    return rows


def keras_md(rows):
    lines = ["## Quick run: issue #47's Keras ratios (one run, np=2)\n", "| measure | goal | tfring | met |",
             "| --- | --- | --- | --- |"]
    for what, goal, value, met in rows:
        lines.append("| %s | >= %.2f | %s | %s |" % (what, goal, "-" if value is None else "%.3f" % value,
                                                   "yes" if met else "**no**"))
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
    keras = keras_ratios(args.out)
    return {"suite": suite, "train": train, "keras": [dict(zip(("measure", "goal", "value", "met"), r))
                                                      for r in keras]}, ratios_md(suite, train, impls) + keras_md(keras)
