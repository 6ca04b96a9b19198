"""One rank of benchmarks/sharded_optimizer.py for the bindings' own optimizers on train_step.py's dense model
(1024-4096-4096-1024-10, 25.2 M params), Adam, one compute thread per rank:

- optax: a jitted step (parameters and state donated) with tfring.jax.DistributedOptimizer(optax.adam), unsharded
  or sharded=True;
- torch: tfring.torch.DistributedOptimizer(torch.optim.Adam), unsharded or sharded=1 or 2;
- ddp: torch's own anchor, DistributedDataParallel over gloo on 127.0.0.1 with torch.optim.Adam (--sharded 0) or
  torch.distributed.optim.ZeroRedundancyOptimizer (--sharded 1).

Each rank measures its peak RSS before the first step and after the last, the bytes of its optimizer state and its
step times; rank 0 writes every rank's numbers to --out (as benchmarks/sharded_job.py)."""
import argparse
import json
import os
import resource
import time

parser = argparse.ArgumentParser()
parser.add_argument("--flavour", choices=("optax", "torch", "ddp"), required=True)
parser.add_argument("--sharded", type=int, default=0)
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--port", type=int, default=29533)
parser.add_argument("--out", required=True)
ARGS = parser.parse_args()
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
os.environ.setdefault("OMP_NUM_THREADS", "1")
SIZES = (1024, 4096, 4096, 1024, 10)

import numpy as np  # noqa: E402


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def batch(step, rank):
    rng = np.random.RandomState(1000 * step + rank)
    return rng.rand(ARGS.batch_size, SIZES[0]).astype("float32"), rng.randint(0, SIZES[-1], ARGS.batch_size)


def run_optax():
    import jax
    import jax.numpy as jnp
    import optax

    import tfring.jax as hvd
    hvd.init()
    rng = np.random.RandomState(0)
    params = [{"w": jnp.asarray(rng.normal(0, (2.0 / a) ** 0.5, (a, b)), jnp.float32), "b": jnp.zeros((b,))}
              for a, b in zip(SIZES[:-1], SIZES[1:])]
    before = peak_mib()  # (the state is made by init: measured from before it)
    tx = hvd.DistributedOptimizer(optax.adam(1e-4), sharded=bool(ARGS.sharded))
    state = tx.init(params)

    def loss(params, x, y):
        for i, layer in enumerate(params):
            x = x @ layer["w"] + layer["b"]
            x = jax.nn.relu(x) if i < len(params) - 1 else x
        return optax.softmax_cross_entropy_with_integer_labels(x, y).mean()

    def train_step(params, state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    step, times = jax.jit(train_step, donate_argnums=(0, 1)), []
    for s in range(ARGS.steps):
        x, y = batch(s, hvd.rank())
        start = time.perf_counter()
        params, state, value = step(params, state, x, y)
        value.block_until_ready()
        times.append(time.perf_counter() - start)
    state_bytes = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(state))
    return hvd, before, times, state_bytes


def torch_model():
    import torch
    torch.manual_seed(0)
    layers = []
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.ReLU()] if i < len(SIZES) - 2 else [])
    return torch.nn.Sequential(*layers)


def state_bytes_of(optimizer):
    import torch
    return sum(t.numel() * t.element_size() for st in optimizer.state.values() for t in st.values()
               if torch.is_tensor(t))


def run_torch():
    import torch

    import tfring.torch as hvd
    hvd.init()
    torch.set_num_threads(1)
    model = torch_model()
    before = peak_mib()  # (DDP's buckets and the optimizers' state come after)
    if ARGS.flavour == "ddp":
        import torch.distributed as dist
        from torch.distributed.optim import ZeroRedundancyOptimizer
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % ARGS.port, rank=hvd.rank(),
                                world_size=hvd.size())
        model = torch.nn.parallel.DistributedDataParallel(model)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-4) \
            if ARGS.sharded else torch.optim.Adam(model.parameters(), lr=1e-4)
    else:
        opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-4),
                                       named_parameters=model.named_parameters(), sharded=ARGS.sharded)
    times = []
    for s in range(ARGS.steps):
        x, y = (torch.from_numpy(v) for v in batch(s, hvd.rank()))
        start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return hvd, before, times, state_bytes_of(opt.optim if ARGS.flavour == "ddp" and ARGS.sharded else opt)


hvd, before, times, state_bytes = run_optax() if ARGS.flavour == "optax" else run_torch()
row = {"rank": hvd.rank(), "peak_before_mib": before, "peak_after_mib": peak_mib(),
       "optimizer_mib": state_bytes / 2 ** 20, "step_s": sorted(times[2:])[len(times[2:]) // 2]}
rows = hvd.allgather_object(row)
if hvd.rank() == 0:
    with open(ARGS.out, "w") as f:
        json.dump({"backend": ARGS.flavour, "np": hvd.size(), "sharded": ARGS.sharded, "ranks": rows}, f)
