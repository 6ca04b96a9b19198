"""Runs the GPU check's launches (tools/gpu_check_ranks.py under mpirun) and writes OUT/report.json.

    python tools/gpu_check.py OUT [--only NAME ...]

Called by tools/gpu_check.sh after the build; run by hand, it uses the tfring installed in this Python.
A launch passes when mpirun exits 0 and every rank reported every case passing.
"""
import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# (name, check, ranks, extra environment). At np >= 2 the ranks share the one GPU: the staged (host) path, as
# with TFRING_NCCL=0.
LAUNCHES = [
    ("torch_np1_nccl", "torch_collectives", 1, {}),
    ("jax_np1_nccl", "jax_collectives", 1, {}),
    ("torch_np2_staged", "torch_collectives", 2, {}),
    ("jax_np2_staged", "jax_collectives", 2, {}),
    ("keras_jax_np2", "keras_fit", 2, {"KERAS_BACKEND": "jax"}),
    ("keras_torch_np2", "keras_fit", 2, {"KERAS_BACKEND": "torch"}),
    ("torch_np3_staged", "torch_collectives", 3, {}),
    ("torch_np1_nccl_off", "torch_collectives", 1, {"TFRING_NCCL": "0"}),
    ("torch_np1_bandwidth", "torch_bandwidth", 1, {}),
    ("torch_np2_staged_bandwidth", "torch_bandwidth", 2, {}),
]


def facts():
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "python": platform.python_version()}
    os.environ.setdefault("KERAS_BACKEND", "jax")  # keras' default backend, TensorFlow, is not there
    for mod in ("torch", "jax", "jaxlib", "keras", "mpi4py", "tfring"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001 -- a fact we could not read
            out[mod] = "unavailable: %s" % e
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        out["gpu"] = subprocess.run(query, stdout=subprocess.PIPE, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        out["gpu"] = "nvidia-smi failed: %s" % e
    try:
        import torch
        out["torch_cuda"] = torch.version.cuda
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as e:  # noqa: BLE001
        out["torch_cuda"] = "unavailable: %s" % e
    try:
        import tfring.torch as hvd
        out["tfring_nccl_built"] = bool(hvd.nccl_built())
    except Exception as e:  # noqa: BLE001
        out["tfring_nccl_built"] = "unavailable: %s" % e
    return out


def launch(name, check, np_, extra, parts, timeout):
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1",
               XLA_PYTHON_CLIENT_PREALLOCATE="false", TFRING_GPU_TIMEOUT_SECONDS="60",
               TFRING_STALL_SHUTDOWN_TIME_SECONDS="90", GPU_CHECK_TAG="." + name, **extra)
    cmd = [mpirun if os.path.exists(mpirun) else "mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none",
           sys.executable, os.path.join(HERE, "gpu_check_ranks.py"), check, parts]
    start = time.time()
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, start_new_session=True)
        rc, out = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout after %d s" % timeout, (e.stdout or b"").decode(errors="replace") if e.stdout else ""
    ranks = {}
    for path in sorted(glob.glob(os.path.join(parts, "%s.%s.rank*.json" % (check, name)))):
        with open(path) as f:
            ranks[path.rsplit(".rank", 1)[1][:-5]] = json.load(f)
    cases = {}
    for rank, res in sorted(ranks.items()):
        for case, v in res.items():
            cases.setdefault(case, {})["rank" + rank] = v
    ok = rc == 0 and len(ranks) == np_ and all(v["ok"] for r in ranks.values() for v in r.values()) and bool(cases)
    rec = {"ok": ok, "np": np_, "env": extra, "rc": rc, "seconds": round(time.time() - start, 1), "cases": cases}
    if not ok:
        rec["output_tail"] = out[-6000:]
    print("%-22s %-4s %6.1f s  %s" % (name, "PASS" if ok else "FAIL", rec["seconds"],
                                      ", ".join("%s=%s" % (c, all(v["ok"] for v in r.values()))
                                                for c, r in cases.items()) or out[-300:]), flush=True)
    return rec


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--timeout", type=int, default=150, help="seconds per launch")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    report = {"facts": facts(), "launches": {}}
    with tempfile.TemporaryDirectory() as parts:
        for name, check, np_, extra in LAUNCHES:
            if a.only is None or name in a.only:
                report["launches"][name] = launch(name, check, np_, extra, parts, a.timeout)
    report["ok"] = all(v["ok"] for v in report["launches"].values())
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("gpu_check: %s" % ("all passed" if report["ok"] else "FAILED"))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
