"""One rank of benchmarks/compression.py (run under tfringrun): in the same processes, the gradient compressions of
tfring.torch.DistributedOptimizer (none, fp16, bf16, PowerSGD) and of torch DDP's communication hooks (none, bf16,
PowerSGD, over gloo on 127.0.0.1): the step time on the dense-25M model, the elements each step sends, and the test
accuracy of an MLP on scikit-learn's digits after the same epochs. Rank 0 writes one JSON file (argv[1])."""
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.algorithms.ddp_comm_hooks.default_hooks as default_hooks
import torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook as powersgd_hook
import torch.nn.functional as F

import tfring.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_ms  # noqa: E402
from torch_job import BATCH, WIDTH  # noqa: E402
from torch_job import model as dense_model  # noqa: E402 (the dense-25M model of the other benchmarks)

EPOCHS, DIGITS_BATCH, WARMUP = 20, 32, 10


def tfring_opt(net, kind, rank, lr, momentum=0.0):
    compression = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16, "bf16": hvd.Compression.bf16}.get(
        kind) or hvd.Compression.powersgd(rank=rank, warmup_steps=WARMUP)
    return net, hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr, momentum=momentum),
                                         named_parameters=net.named_parameters(), compression=compression)


def ddp_opt(net, kind, rank, lr, momentum=0.0):
    # PowerSGD over gloo: one bucket. With several, each bucket's hook issues its second allreduce from a future's
    # callback, and the ranks' callbacks can issue them in different orders: gloo then aborts ("Received data size
    # doesn't match expected size"), as measured here with the default 25 MB buckets.
    ddp = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=256 if kind == "powersgd" else 25)
    if kind == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif kind == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif kind == "powersgd":
        # min_compression_rate=2 and warm-up as tfring's defaults here; torch needs start_powerSGD_iter >= 2.
        state = powersgd_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                            start_powerSGD_iter=max(WARMUP, 2), min_compression_rate=2)
        ddp.register_comm_hook(state, powersgd_hook.powerSGD_hook)
    return ddp, torch.optim.SGD(net.parameters(), lr, momentum=momentum)


def wire_elements(net, kind, rank):
    shapes = [p.shape for p in net.parameters()]
    if kind == "powersgd":
        return hvd.Compression.powersgd(rank=rank).wire_elements(shapes)
    return sum(int(np.prod(s)) for s in shapes)


def step_case(make, kind, rank):
    net, opt = make(dense_model(), kind, rank, 0.001)
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)

    def step():
        opt.zero_grad()
        F.mse_loss(net(x), y).backward()
        opt.step()
    for _ in range(WARMUP + 2):  # past the warm-up: compressed steps are timed
        step()
    elements = wire_elements(dense_model(), kind, rank)
    return {"step_ms": median_ms(step, 10), "elements": elements,
            "bytes": elements * (2 if kind in ("fp16", "bf16") else 4)}


def digits():
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    return torch.as_tensor(x[:cut]), torch.as_tensor(y[:cut]), torch.as_tensor(x[cut:]), torch.as_tensor(y[cut:])


def accuracy_case(make, kind, rank, data):
    x, y, xt, yt = data
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 10))
    model, opt = make(net, kind, rank, 0.05, momentum=0.9)
    mine = torch.arange(hvd.rank(), len(x), hvd.size())
    for epoch in range(EPOCHS):
        perm = mine[torch.randperm(len(mine), generator=torch.Generator().manual_seed(epoch))]
        for i in range(0, len(perm) - DIGITS_BATCH + 1, DIGITS_BATCH):
            idx = perm[i:i + DIGITS_BATCH]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    with torch.no_grad():
        return float((net(xt).argmax(1) == yt).float().mean())


def main():
    torch.set_num_threads(1)
    hvd.init()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("BENCH_PORT", "29513"))
    dist.init_process_group("gloo", rank=hvd.rank(), world_size=hvd.size())
    started, data, rows = time.time(), digits(), []
    cases = [("tfring", tfring_opt, k, r) for k, r in (("none", 0), ("fp16", 0), ("bf16", 0), ("powersgd", 1),
                                                        ("powersgd", 4))]
    cases += [("ddp", ddp_opt, k, r) for k, r in (("none", 0), ("bf16", 0), ("powersgd", 1), ("powersgd", 4))]
    only = os.environ.get("BENCH_CASES")  # e.g. "ddp:powersgd,tfring:none": a subset, for a rerun
    for lib, make, kind, rank in cases:
        if only and "%s:%s" % (lib, kind) not in only.split(","):
            continue
        row = {"library": lib, "compression": kind, "rank": rank}
        row.update(step_case(make, kind, rank))
        row["digits_accuracy"] = accuracy_case(make, kind, rank, data)
        rows.append(row)
        if hvd.rank() == 0:
            print("%-6s %-8s r=%d step %.1f ms, %.1f MB/step, digits %.4f" % (
                lib, kind, rank, row["step_ms"], row["bytes"] / 1e6, row["digits_accuracy"]), flush=True)
    if hvd.rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump({"np": hvd.size(), "torch": torch.__version__, "epochs": EPOCHS, "warmup_steps": WARMUP,
                       "rows": rows, "seconds": time.time() - started}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
