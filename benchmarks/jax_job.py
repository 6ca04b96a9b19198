"""One rank of benchmarks/jax_bench.py (run under tfringrun at np=2): allreduce (sum, float32) of 4 KiB - 64 MiB
per rank, in the same processes, alternating per size:

- raw mpi4py on numpy buffers (out of place, and in place: the ceiling);
- no collective: a jitted `v + 1` (what JAX itself costs to return a fresh array of the size);
- tfring.jax inside jax.jit;
- mpi4jax inside jax.jit (if it imports);
- JAX's own multi-process CPU collectives: `jax.distributed` with gloo, `psum` under `shard_map` over the mesh of
  both processes' CPU devices (with --gloo; gloo's sockets on 127.0.0.1).

Every call starts after an MPI barrier and the slowest rank's median counts (benchmarks/timing.py); JAX calls are
timed to `block_until_ready`. "tfring_donated" passes the input as a donated argument (`donate_argnums`: XLA may
then reduce in the caller's buffer instead of copying it into a fresh output first). Rank 0 writes --out."""
import argparse
import functools
import json
import os
import socket
import sys
import time

from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--gloo", action="store_true", help="also measure jax.distributed + gloo (psum)")
parser.add_argument("--iters-scale", type=float, default=1.0)
parser.add_argument("--max-bytes", type=int, default=64 << 20, help="largest size measured")
ARGS = parser.parse_args()
COMM = MPI.COMM_WORLD

import jax  # noqa: E402

if ARGS.gloo:
    # Before anything creates JAX's CPU client: it is built with the distributed client and gloo collectives.
    from jax._src import xla_bridge
    xla_bridge._jax.make_gloo_tcp_collectives = functools.partial(xla_bridge._jax.make_gloo_tcp_collectives,
                                                                  hostname="127.0.0.1")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if COMM.rank == 0:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
    port = COMM.bcast(port if COMM.rank == 0 else None, root=0)
    jax.distributed.initialize(coordinator_address="127.0.0.1:%d" % port, num_processes=COMM.size,
                               process_id=COMM.rank, initialization_timeout=120)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import tfring.jax as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import measure  # noqa: E402

try:
    import mpi4jax
except ImportError as e:  # the driver records why (see jax_bench.py)
    mpi4jax, MPI4JAX_ERROR = None, repr(e)
else:
    MPI4JAX_ERROR = None

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def iters_for(nbytes):
    n = 100 if nbytes <= (1 << 20) else 20 if nbytes <= (16 << 20) else 8
    return max(3, int(n * ARGS.iters_scale))


def ready(f):
    return lambda *a: jax.block_until_ready(f(*a))


def gloo_fn(n):
    mesh = Mesh(np.array(jax.devices()), ("r",))
    spec = NamedSharding(mesh, P("r"))
    psum = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "r"), mesh=mesh, in_specs=P("r"), out_specs=P("r")))
    x = jax.make_array_from_process_local_data(spec, np.ones(n, np.float32), (n * COMM.size,))
    return lambda: jax.block_until_ready(psum(x))


def check(name, got, n):
    """Every path must return the sum over ranks (ones everywhere: the rank count)."""
    got = np.asarray(got).reshape(-1)
    if got.size != n or not np.all(got == COMM.size):
        raise SystemExit("%s: wrong result on rank %d: %s" % (name, COMM.rank, got[:4]))


def collectives():
    tfring_sum = jax.jit(lambda v: hvd.allreduce(v, op=hvd.Sum))
    alone = jax.jit(lambda v: v + 1.0)  # JAX's own cost of a jitted call writing a fresh array of the size
    tfring_donated = jax.jit(lambda v: hvd.allreduce(v, op=hvd.Sum), donate_argnums=0)
    mpi4jax_sum = jax.jit(lambda v: mpi4jax.allreduce(v, op=MPI.SUM, comm=COMM)) if mpi4jax else None
    rows = []
    for nbytes in [s for s in SIZES if s <= ARGS.max_bytes]:
        n = nbytes // 4
        iters = iters_for(nbytes)
        buf, out, inb = np.ones(n, np.float32), np.empty(n, np.float32), np.ones(n, np.float32)
        x = jnp.ones(n, jnp.float32)
        fns = {"raw": lambda: COMM.Allreduce(buf, out, op=MPI.SUM),
               "raw_inplace": lambda: COMM.Allreduce(MPI.IN_PLACE, inb, op=MPI.SUM),  # doubles: < 2^110
               "tfring": lambda: jax.block_until_ready(tfring_sum(x))}
        held = [jnp.ones(n, jnp.float32)]

        def donated():  # each call's result is the next call's (donated) input: it doubles, < 2^110 here
            held[0] = jax.block_until_ready(tfring_donated(held[0]))
        fns["tfring_donated"] = donated
        fns["jax_alone"] = lambda: jax.block_until_ready(alone(x))
        check("tfring.jax", tfring_sum(x), n)
        if mpi4jax_sum:
            check("mpi4jax", mpi4jax_sum(x), n)
            fns["mpi4jax"] = lambda: jax.block_until_ready(mpi4jax_sum(x))
        if ARGS.gloo:
            fns["gloo"] = gloo_fn(n)
            check("gloo psum", fns["gloo"]().addressable_shards[0].data, n)
        row = {"bytes": nbytes, "iters": iters}
        for key, fn in fns.items():
            row[key + "_ms"], row[key + "_faults"] = measure(fn, iters, COMM)
        rows.append(row)
        if COMM.rank == 0:
            print(json.dumps(row), flush=True)
    return rows


def main():
    hvd.init()
    started = time.time()
    result = {"np": COMM.size, "jax": jax.__version__, "gloo": ARGS.gloo, "mpi4jax_error": MPI4JAX_ERROR,
              "mpi4jax": getattr(mpi4jax, "__version__", None), "mpi4py": sys.modules["mpi4py"].__version__,
              "mpi": MPI.Get_library_version().splitlines()[0], "collectives": collectives()}
    result["seconds"] = time.time() - started
    if COMM.rank == 0:
        with open(ARGS.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
