"""One rank's part of the GPU check (tools/gpu_check.sh): `python gpu_check_ranks.py CHECK PARTS_DIR` under mpirun.

Each check runs named cases on CUDA tensors and writes {case: {"ok": bool, "error"/"detail": ...}} to
PARTS_DIR/CHECK.rank<r>.json; tools/gpu_check.py merges the ranks' files into the report. Every value is checked on
every rank against what the ranks' inputs imply, and every result must stay on the GPU.
"""
import json
import os
import sys
import time
import traceback

CHECK, PARTS = sys.argv[1], sys.argv[2]
results = {}


def case(name):
    def run(fn):
        start = time.time()
        try:
            detail = fn()
            results[name] = {"ok": True, "seconds": round(time.time() - start, 3)}
            if detail is not None:
                results[name]["detail"] = detail
        except Exception:  # noqa: BLE001 -- recorded, and the report fails
            results[name] = {"ok": False, "error": traceback.format_exc()[-3000:]}
        return fn
    return run


def close(a, b, what, tol=1e-5):
    import numpy as np
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or not np.allclose(a, b, rtol=tol, atol=tol):
        raise AssertionError("%s: got %s, expected %s" % (what, a.ravel()[:8], b.ravel()[:8]))


def torch_collectives():
    import torch
    import tfring.torch as hvd
    hvd.init()
    r, n, dev = hvd.rank(), hvd.size(), torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    ranks = torch.arange(1, n + 1, dtype=torch.float64)

    def on_gpu(t):
        assert t.is_cuda, "result on %s" % t.device
        return t.cpu()

    @case("allreduce_sum_avg_f32")
    def _():
        x = torch.arange(1000, device=dev, dtype=torch.float32) * (r + 1)
        close(on_gpu(hvd.allreduce(x, op=hvd.Sum)), torch.arange(1000) * ranks.sum(), "sum")
        close(on_gpu(hvd.allreduce(x)), torch.arange(1000) * ranks.mean(), "average")

    @case("allreduce_dtypes")
    def _():
        for dt in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.uint8):
            x = torch.full((17,), r + 1, device=dev, dtype=dt)
            out = on_gpu(hvd.allreduce(x, op=hvd.Sum, name="dt_%s" % str(dt).split(".")[-1]))
            assert out.dtype == dt, out.dtype
            close(out.double(), torch.full((17,), float(ranks.sum())), str(dt))

    @case("allreduce_min_max_prescale_postscale")
    def _():
        x = torch.full((5,), float(r + 1), device=dev)
        close(on_gpu(hvd.allreduce(x, op=hvd.Min)), torch.ones(5), "min")
        close(on_gpu(hvd.allreduce(x, op=hvd.Max)), torch.full((5,), float(n)), "max")
        out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
        close(on_gpu(out), torch.full((5,), 1.5 * float(ranks.sum())), "prescale/postscale")

    @case("allreduce_inplace_grouped")
    def _():
        x = torch.full((3, 4), float(r + 1), device=dev)
        hvd.allreduce_(x, op=hvd.Sum)
        close(on_gpu(x), torch.full((3, 4), float(ranks.sum())), "allreduce_")
        ts = [torch.full((k + 1,), float(r + k), device=dev) for k in range(4)]
        outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
        for k, o in enumerate(outs):
            close(on_gpu(o), torch.full((k + 1,), float(sum(q + k for q in range(n)))), "grouped %d" % k)

    @case("stream_order")
    def _():
        # The input is written by a long kernel queued on a side stream just before the call: a collective that
        # does not wait for the framework's stream reads stale memory.
        side = torch.cuda.Stream()
        a = torch.randn(4096, 4096, device=dev)
        with torch.cuda.stream(side):
            x = torch.zeros(1 << 20, device=dev)
            for _ in range(8):
                a = a @ a / 64.0
            x.add_(r + 1)
            out = hvd.allreduce(x, op=hvd.Sum, name="stream_order")
        side.synchronize()
        close(on_gpu(out)[:4], torch.full((4,), float(ranks.sum())), "after a long kernel")

    @case("allgather_broadcast")
    def _():
        x = torch.full((r + 1, 3), float(r), device=dev)
        g = on_gpu(hvd.allgather(x))
        exp = torch.cat([torch.full((q + 1, 3), float(q)) for q in range(n)])
        close(g, exp, "allgather")
        y = torch.full((6,), float(r + 10), device=dev)
        hvd.broadcast_(y, root_rank=n - 1)
        close(on_gpu(y), torch.full((6,), float(n - 1 + 10)), "broadcast_")

    @case("alltoall_reducescatter")
    def _():
        x = torch.cat([torch.full((q + 1,), float(100 * r + q), device=dev) for q in range(n)])
        splits = torch.tensor([q + 1 for q in range(n)], dtype=torch.int32)
        out, received = hvd.alltoall(x, splits=splits)
        exp = torch.cat([torch.full((r + 1,), float(100 * q + r)) for q in range(n)])
        close(on_gpu(out), exp, "alltoall")
        close(received.cpu(), torch.full((n,), float(r + 1)), "received splits")
        z = torch.arange(4 * n, device=dev, dtype=torch.float32) + r
        rs = on_gpu(hvd.reducescatter(z, op=hvd.Sum))
        close(rs, (torch.arange(4 * n, dtype=torch.float64) * n + sum(range(n)))[4 * r:4 * r + 4], "reducescatter")

    @case("optimizer_step")
    def _():
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 2).to(dev)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        w0 = [p.detach().clone() for p in model.parameters()]
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        gen = torch.Generator().manual_seed(100 + r)
        data = torch.randn(16, 8, generator=gen).to(dev)
        opt.zero_grad()
        model(data).pow(2).mean().backward()
        opt.step()
        # Reference: the mean of every rank's gradient, from every rank's data gathered here.
        every = hvd.allgather(data).view(n, 16, 8)
        ref = torch.nn.Linear(8, 2).to(dev)
        with torch.no_grad():
            for p, w in zip(ref.parameters(), w0):
                p.copy_(w)
        sum(ref(every[q]).pow(2).mean() for q in range(n)).div(n).backward()
        for p, q, w in zip(model.parameters(), ref.parameters(), w0):
            close(on_gpu(p.detach()), (w - 0.1 * q.grad).cpu(), "parameter after one step", tol=1e-4)


def torch_bandwidth():
    import torch
    import tfring.torch as hvd
    hvd.init()
    dev = torch.device("cuda", 0)
    rows = []

    @case("allreduce_bandwidth")
    def _():
        for mib in (1, 4, 16, 64, 256):
            x = torch.ones(mib << 18, device=dev)  # float32
            y = torch.empty_like(x)
            for _ in range(3):
                hvd.allreduce(x, op=hvd.Sum, name="bw_%d" % mib)
            torch.cuda.synchronize()
            reps, t = 10, time.perf_counter()
            for _ in range(reps):
                out = hvd.allreduce(x, op=hvd.Sum, name="bw_%d" % mib)
            torch.cuda.synchronize()
            ring = (time.perf_counter() - t) / reps
            t = time.perf_counter()
            for _ in range(reps):
                y.copy_(x)
            torch.cuda.synchronize()
            copy = (time.perf_counter() - t) / reps
            assert float(out[0]) == hvd.size()
            # The same allreduce on a CPU tensor: what host staging adds to the MPI path (np >= 2).
            host = torch.ones(mib << 18)
            hvd.allreduce(host, op=hvd.Sum, name="cpu_%d" % mib)
            t = time.perf_counter()
            for _ in range(3):
                hvd.allreduce(host, op=hvd.Sum, name="cpu_%d" % mib)
            cpu = (time.perf_counter() - t) / 3
            rows.append({"mib": mib, "tfring_ms": round(ring * 1e3, 3), "algbw_gbs": round(mib * 2**20 / ring / 1e9, 2),
                         "torch_copy_ms": round(copy * 1e3, 3), "ratio_copy_over_tfring": round(copy / ring, 3),
                         "cpu_tensor_ms": round(cpu * 1e3, 3), "ratio_cpu_over_tfring": round(cpu / ring, 3)})
        return rows


def jax_collectives():
    import jax
    import jax.numpy as jnp
    import numpy as np
    import tfring.jax as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    assert jax.devices()[0].platform == "gpu", jax.devices()
    tot = sum(range(1, n + 1))

    def on_gpu(x):
        assert all(d.platform == "gpu" for d in x.devices()), x.devices()
        return np.asarray(x)

    @case("allreduce_eager_and_jit")
    def _():
        x = jnp.arange(1000, dtype=jnp.float32) * (r + 1)
        close(on_gpu(hvd.allreduce(x, op=hvd.Sum)), np.arange(1000) * tot, "eager sum")
        f = jax.jit(lambda v: hvd.allreduce(v * 2.0, name="jit_avg"))
        close(on_gpu(f(x)), np.arange(1000) * 2.0 * tot / n, "jit average")
        close(on_gpu(f(x)), np.arange(1000) * 2.0 * tot / n, "jit average, second call")

    @case("allgather_broadcast_alltoall_reducescatter")
    def _():
        g = hvd.allgather(jnp.full((r + 1, 2), float(r)))
        close(on_gpu(g), np.concatenate([np.full((q + 1, 2), float(q)) for q in range(n)]), "allgather")
        b = hvd.broadcast(jnp.full((4,), float(r + 7)), root_rank=n - 1)
        close(on_gpu(b), np.full((4,), float(n - 1 + 7)), "broadcast")
        a = hvd.alltoall(jnp.concatenate([jnp.full((2,), float(10 * r + q)) for q in range(n)]))
        a = a[0] if isinstance(a, tuple) else a
        close(on_gpu(a), np.concatenate([np.full((2,), float(10 * q + r)) for q in range(n)]), "alltoall")
        z = jnp.arange(2 * n, dtype=jnp.float32) + r
        close(on_gpu(hvd.reducescatter(z, op=hvd.Sum)), (np.arange(2 * n) * n + sum(range(n)))[2 * r:2 * r + 2],
              "reducescatter")

    @case("jit_grad_step")
    def _():
        w = jnp.ones((4,))
        xs = jnp.arange(4.0) + r

        @jax.jit
        def step(w):
            g = jax.grad(lambda w: jnp.sum((w * xs) ** 2))(w)
            return w - 0.01 * hvd.allreduce(g, name="grad")
        out = step(w)
        exp = np.mean([np.ones(4) - 0.01 * 2 * np.ones(4) * (np.arange(4.0) + q) ** 2 for q in range(n)], axis=0)
        close(on_gpu(out), exp, "one SGD step of averaged gradients")


def keras_fit():
    import keras
    import numpy as np
    import tfring.keras as hvd
    from sklearn.datasets import load_digits
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    keras.utils.set_random_seed(1234 + r)
    d = load_digits()
    x, y = (d.data / 16.0).astype("float32")[r::n], d.target.astype("int64")[r::n]
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.002 * n)),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    @case("fit_" + keras.backend.backend())
    def _():
        hist = model.fit(x, y, batch_size=32, epochs=4, verbose=0,
                         callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                    hvd.callbacks.MetricAverageCallback()])
        loss = hist.history["loss"]
        assert loss[-1] < loss[0] * 0.7, loss
        v = model.trainable_variables[0].value
        place = str(v.devices() if hasattr(v, "devices") else v.device)
        assert "cuda" in place.lower() or "gpu" in place.lower(), place
        # Same weights on every rank: each rank's checksum against rank 0's.
        mine = float(sum(np.asarray(keras.ops.convert_to_numpy(w)).sum() for w in model.trainable_variables))
        every = hvd.allgather_object(mine)
        assert max(every) - min(every) < 1e-4 * max(1.0, abs(mine)), every
        return {"loss": [round(v, 4) for v in loss], "variables_on": place}


{"torch_collectives": torch_collectives, "torch_bandwidth": torch_bandwidth, "jax_collectives": jax_collectives,
 "keras_fit": keras_fit}[CHECK]()
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
with open(os.path.join(PARTS, "%s.rank%d.json" % (CHECK + os.environ.get("GPU_CHECK_TAG", ""), rank)), "w") as f:
    json.dump(results, f)
print("gpu_check_ranks: %s rank %d: %d/%d cases passed" % (CHECK, rank, sum(v["ok"] for v in results.values()),
                                                          len(results)), flush=True)
