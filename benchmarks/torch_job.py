"""One rank of benchmarks/torch_bench.py (run under tfringrun): in the same processes, raw mpi4py allreduce on
numpy buffers, torch.distributed (gloo, over 127.0.0.1) and tfring.torch, sizes 4 KiB - 64 MiB; then a training
step of the same dense model through DistributedDataParallel (gloo) and through tfring.torch.DistributedOptimizer.
Rank 0 writes one JSON file (argv[1]). Every call starts after a barrier; the slowest rank's median counts
(benchmarks/timing.py)."""
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

import tfring.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_ms  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
WIDTH, LAYERS, BATCH = 2048, 6, 32  # the TF step benchmark's dense model (25.2 M params)


def iters_for(nbytes):
    return 50 if nbytes <= (1 << 20) else 20 if nbytes <= (16 << 20) else 8


def collectives(comm):
    rows = []
    for nbytes in SIZES:
        n = nbytes // 4
        x = torch.ones(n)
        buf, out = np.ones(n, np.float32), np.empty(n, np.float32)
        iters = iters_for(nbytes)
        row = {"bytes": nbytes,
               "raw_ms": median_ms(lambda: comm.Allreduce(buf, out), iters),
               "gloo_ms": median_ms(lambda: dist.all_reduce(x), iters),
               "tfring_ms": median_ms(lambda: hvd.allreduce(x, op=hvd.Sum), iters),
               "tfring_inplace_ms": median_ms(lambda: hvd.allreduce_(x, op=hvd.Sum), iters)}
        rows.append(row)
    return rows


def model():
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def step_ms(net, opt, steps=12):
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return median_ms(step, steps)


def training():
    out = {}
    net = model()  # the same step with no collective: the baseline both libraries are measured against
    opt = torch.optim.SGD(net.parameters(), 0.01)
    step_ms(net, opt)  # the process's first steps warm its allocator and thread pool up: not counted
    out["plain_ms"] = step_ms(net, opt)
    net = model()
    out["ddp_ms"] = step_ms(torch.nn.parallel.DistributedDataParallel(net), torch.optim.SGD(net.parameters(), 0.01))
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), 0.01), named_parameters=net.named_parameters())
    out["tfring_ms"] = step_ms(net, opt)
    return out


def main():
    torch.set_num_threads(1)
    hvd.init()
    comm = MPI.COMM_WORLD
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("BENCH_PORT", "29511"))
    dist.init_process_group("gloo", rank=hvd.rank(), world_size=hvd.size())
    started = time.time()
    result = {"np": hvd.size(), "torch": torch.__version__, "collectives": collectives(comm)}
    result.update(training())
    result["seconds"] = time.time() - started
    if hvd.rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
