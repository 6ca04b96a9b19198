"""Tables (markdown) and the bus-bandwidth plot of run_all.py's merged results."""

MODES = ("eager", "function", "tape")


def best(row, impl):
    """The library's fastest way to run this case (eager, tf.function or the tape), or None."""
    values = [row["%s_%s_ms" % (impl, m)] for m in MODES if "%s_%s_ms" % (impl, m) in row]
    return min(values) if values else None


def fmt(v, spec="%.3f"):
    return spec % v if v is not None else ""


def suite_md(rows, impls, runs):
    hv = "horovod" in impls
    head = ["case", "raw mpi4py ms", "tfring eager", "tfring tf.function", "tfring tape"]
    head += ["Horovod eager", "Horovod tf.function", "Horovod tape"] if hv else []
    head += ["MWMS", "TF alone (see below)", "raw / tfring (bandwidth ratio)"]
    head += ["Horovod / tfring (speedup)"] if hv else []
    head += ["MWMS / tfring", "page faults per call: tfring"] + (["Horovod"] if hv else [])
    lines = ["## Collectives side by side, np=2, medians of %d runs (ms)\n" % runs, "| " + " | ".join(head) + " |",
             "|" + " --- |" * len(head)]
    for r in rows:
        t = best(r, "tfring")
        cells = [r["case"], fmt(r["raw_ms"])] + [fmt(r.get("tfring_%s_ms" % m)) for m in MODES]
        if hv:
            cells += [fmt(r.get("horovod_%s_ms" % m)) for m in MODES]
        alone = next((r[k] for k in ("tf_gradients_floor_ms", "tf_function_floor_ms", "tf_new_tensor_ms") if k in r),
                     None)
        cells += [fmt(r.get("mwms_ms")), fmt(alone), "%.2f" % (r["raw_ms"] / t)]
        if hv:
            cells.append("%.2f" % (best(r, "horovod") / t))
        cells.append(fmt(r["mwms_ms"] / t if "mwms_ms" in r else None, "%.1f"))
        fault = lambda impl: min((r["%s_%s_faults" % (impl, m)] for m in MODES  # noqa: E731
                                  if "%s_%s_faults" % (impl, m) in r), default=None)
        cells.append(fmt(fault("tfring"), "%.0f"))
        if hv:
            cells.append(fmt(fault("horovod"), "%.0f"))
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", "TF alone: what TensorFlow itself costs for the case, no collective: an empty tf.function "
                    "call (<= 64 KiB), a new tensor of the size (x * 1.0, larger), or computing the same gradients "
                    "without DistributedGradientTape (ResNet-50 set).", ""]


def train_md(rows, runs):
    lines = ["## Training step, dense model (25.2 M params), batch 64 per rank, one intra-op thread per process, "
             "medians of %d runs\n" % runs,
             "| loop | library | np=1 (one core) samples/s | np=2 samples/s | efficiency (range) |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append("| %s | %s | %.1f | %.1f | %.2f (%.2f-%.2f) |" % (
            "Keras fit" if r["mode"] == "fit" else "custom (tape)",
            "no collective (ceiling)" if r["impl"] == "none" else r["impl"], r["np1_samples_per_sec"],
            r["np2_samples_per_sec"], r["efficiency"], *r["efficiency_range"]))
    return lines + [""]


def autotune_md(a):
    md = ["## Autotune vs hand-picked (ResNet-50 gradient set, grouped allreduce, np=2)\n",
          "| setting | fusion MiB | cycle ms | step ms |", "| --- | --- | --- | --- |"]
    md += ["| hand-picked (best of 2 jobs) | %g | %g | %.1f |" % (
        h["fusion_threshold_bytes"] / 2**20, h["cycle_time_ms"], h["step_ms"]) for h in a["hand_picked"]]
    t = a["tuned"]
    md.append("| autotuned (after %.0f s of tuning) | %g | %g | %.1f |" % (
        t["tuning_seconds"], t["fusion_threshold_bytes"] / 2**20, t["cycle_time_ms"], t["step_ms"]))
    return md + ["\nautotuned / best hand-picked: %.2f\n" % a["tuned_over_best"]]


def plot(rows, impls, np_, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    single = [r for r in rows if r["case"].startswith("allreduce ")]
    sizes = [r["bytes"] for r in single]
    series = [("raw mpi4py", [r["raw_ms"] for r in single])]
    series += [(impl, [best(r, impl) for r in single]) for impl in impls]
    if all("mwms_ms" in r for r in single):
        series.append(("MWMS", [r["mwms_ms"] for r in single]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, ms in series:
        # Bus bandwidth: what each link carries in a ring allreduce, 2(n-1)/n of the buffer, per second.
        ax.plot(sizes, [b * 2 * (np_ - 1) / np_ / (t / 1000) / 1e9 for b, t in zip(sizes, ms)], marker="o",
                label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("allreduce size (bytes, float32)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("allreduce bus bandwidth, np=%d, medians of runs" % np_)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
