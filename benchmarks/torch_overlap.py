"""Does overlapping the gradients' allreduces with backward pay for tfring.torch.DistributedOptimizer? One job:

    PYTHONPATH=. python -m tfring.runner -np 2 python benchmarks/torch_overlap.py [--reps 3] [--steps 20] \
        [--out benchmarks/results/torch_overlap.json]    # np=1 (under taskset -c 0): the one-core baseline

The dense-25M step of benchmarks/torch_job.py, one thread per rank, three ways in turn (each rep builds them
again): Horovod's per-parameter allreduces started by backward's hooks (`per_parameter`), one grouped allreduce
after backward (`groups=1`: every gradient in one group, submitted when the last is ready: `grouped`), and the
plain optimizer with no collective (`none`). Prints, per way and rep, the medians of backward, step and the whole
step (ms; every step starts after a barrier; rank 0's times). The first rep pays the allocator's warm-up."""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from mpi4py import MPI

import tfring.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_job import BATCH, WIDTH, model  # noqa: E402


def measure(net, opt, steps):
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    times = []
    for i in range(steps + 2):
        MPI.COMM_WORLD.Barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        t1 = time.perf_counter()
        opt.step()
        if i >= 2:  # two warm-up steps
            times.append((t1 - t0, time.perf_counter() - t1))
    backward, step = (1e3 * statistics.median(t[k] for t in times) for k in (0, 1))
    return {"backward_ms": round(backward, 1), "step_ms": round(step, 1), "total_ms": round(backward + step, 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", help="JSON file: this run is stored under the key np<N>")
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    ways = {"per_parameter": {}, "grouped": {"groups": 1}, "none": None}
    result = {way: [] for way in ways}
    for _ in range(args.reps):
        for way, kwargs in ways.items():
            net = model()
            opt = torch.optim.SGD(net.parameters(), 0.01)
            if kwargs is not None:
                opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters(), **kwargs)
            result[way].append(measure(net, opt, args.steps))
    if hvd.rank() == 0:
        print(json.dumps({"np": hvd.size(), "reps": result}, indent=1))
        if args.out:
            runs = json.load(open(args.out)) if os.path.exists(args.out) else {}
            runs["np%d" % hvd.size()] = result
            with open(args.out, "w") as f:
                json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
