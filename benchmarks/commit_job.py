"""One launch of benchmarks/commit_cost.py: a torch MLP (--params weights) trained with tfring.torch at the launch's
size, a TorchState commit every BENCH_COMMIT_EVERY steps (default 1); prints one JSON line from rank 0: the mean
step time (commits included, amortized) and the median time of `state.commit()` itself. BENCH_COMMIT=0: no
commit; BENCH_WAIT_FOR_DISK=1: each step also waits until its commit is on disk (what the step would pay if the
write were not in the background)."""
import json
import os
import statistics
import sys
import time

import torch

import tfring.torch as hvd
from tfring.common.elastic import checkpoint

params, steps = int(sys.argv[1]), int(sys.argv[2])
COMMIT = os.environ.get("BENCH_COMMIT", "1") == "1"
EVERY = int(os.environ.get("BENCH_COMMIT_EVERY", "1"))
WAIT = os.environ.get("BENCH_WAIT_FOR_DISK") == "1"
torch.set_num_threads(1)
hvd.init()
width = int((params / 2) ** 0.5)
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-6),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, step=0)
x = torch.randn(8, width)
step_s, commit_s = [], []


@hvd.elastic.run
def train(state):
    while state.step < steps:
        start = time.perf_counter()
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
        state.step += 1
        if COMMIT and state.step % EVERY == 0:
            before = time.perf_counter()
            state.commit()
            if WAIT and checkpoint.directory():
                checkpoint.writer().flush(600)
            commit_s.append(time.perf_counter() - before)
        step_s.append(time.perf_counter() - start)


train(state)
if hvd.rank() == 0:
    skip = min(3, steps // 4)  # the first steps warm up allocators and the fusion buffer
    print("RESULT " + json.dumps({"step_ms": 1e3 * statistics.mean(step_s[skip:]),
                                  "commit_ms": 1e3 * statistics.median(commit_s[skip:]) if commit_s else 0.0,
                                  "params": sum(p.numel() for p in model.parameters())}), flush=True)
