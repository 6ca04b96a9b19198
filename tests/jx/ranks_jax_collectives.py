"""tfring.jax's collectives on real ranks, eagerly and inside jax.jit: values checked on every rank against what
each rank can compute of every other rank's input."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tfring.jax as hvd

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
DTYPES = [jnp.int8, jnp.uint8, jnp.int16, jnp.int32, jnp.float16, jnp.bfloat16, jnp.float32]
SHAPES = [(), (0,), (3,), (2, 3, 4)]
MODES = ["eager", "jit"]


def value(r, shape):
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) % 3 + r + 1


def run(mode, fn, *args):
    return jax.jit(fn)(*args) if mode == "jit" else fn(*args)


REDUCERS = {hvd.Sum: np.sum, hvd.Min: np.min, hvd.Max: np.max, hvd.Product: np.prod}


OPS = [hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
# Eagerly every op on every dtype; inside jax.jit (a compile per case) every dtype with Sum and Average and every op
# on float32 and int8: the compiled path maps dtypes and ops through the same tables as the eager one.
CASES = [("eager", d, op) for d in DTYPES for op in OPS] + \
    [("jit", d, op) for d in DTYPES for op in OPS if op in (hvd.Average, hvd.Sum) or d in (jnp.float32, jnp.int8)]


@pytest.mark.parametrize("mode,dtype,op", CASES, ids=["%s-%s-%s" % (m, jnp.dtype(d).name, op) for m, d, op in CASES])
def test_allreduce(mode, dtype, op):
    # Every shape (scalar, empty, 1-D, 3-D) on float32 and int8; one 3-D shape on the other dtypes (each new shape is
    # a compile: the dtype and op tables do not depend on the shape).
    for shape in SHAPES if dtype in (jnp.float32, jnp.int8) else SHAPES[-1:]:
        x = jnp.asarray(value(R, shape), dtype)
        out = run(mode, lambda t: hvd.allreduce(t, op=op, name="ar"), x)
        stack = np.stack([value(r, shape) for r in range(N)])
        if op == hvd.Average:
            expected = stack.sum(0) / N
            if not jnp.issubdtype(dtype, jnp.floating):
                expected = np.trunc(expected)
        else:
            expected = REDUCERS[op](stack, axis=0)
        assert out.shape == shape and out.dtype == dtype
        np.testing.assert_allclose(np.asarray(out, np.float64), expected, rtol=1e-2)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_scales_and_process_set(mode):
    xs = [jnp.full((3,), R + 1.0), jnp.full((2, 2), 2.0 * (R + 1))]
    outs = run(mode, lambda *t: hvd.grouped_allreduce(list(t), op=hvd.Sum, prescale_factor=2.0,
                                                      postscale_factor=0.5, name="g"), *xs)
    total = sum(range(1, N + 1))
    np.testing.assert_allclose(outs[0], np.full((3,), total))
    np.testing.assert_allclose(outs[1], np.full((2, 2), 2.0 * total))


@pytest.mark.parametrize("mode", MODES)
def test_allgather_equal_and_unequal_rows(mode):
    x = jnp.full((2, 3), float(R))
    out = run(mode, lambda t: hvd.allgather(t, name="ag"), x)
    np.testing.assert_array_equal(out, np.repeat(np.arange(N, dtype=np.float32), 2)[:, None] * np.ones(3))
    y = jnp.full((R + 1, 2), R, jnp.int32)  # rank r sends r + 1 rows
    sizes = tuple(range(1, N + 1))
    out = run(mode, lambda t: hvd.allgather(t, name="ag_uneven", sizes=sizes if mode == "jit" else None), y)
    np.testing.assert_array_equal(out, np.concatenate([np.full((r + 1, 2), r) for r in range(N)]))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("root", [0, N - 1])
def test_broadcast_and_pytrees(mode, root):
    x = jnp.arange(5.0) + R
    out = run(mode, lambda t: hvd.broadcast(t, root, name="bc"), x)
    np.testing.assert_array_equal(out, np.arange(5.0) + root)
    tree = {"w": jnp.full((2, 2), float(R)), "b": [jnp.asarray(R), jnp.ones(3, jnp.int32) * R]}
    got = hvd.broadcast_parameters(tree, root_rank=root)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(tree)
    for leaf in jax.tree_util.tree_leaves(got):
        assert np.all(np.asarray(leaf) == root)


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_even_and_with_splits(mode):
    x = jnp.arange(2 * N) + 100 * R
    out, received = run(mode, lambda t: hvd.alltoall(t, name="a2a"), x)
    np.testing.assert_array_equal(out, np.concatenate([np.arange(2 * R, 2 * R + 2) + 100 * r for r in range(N)]))
    np.testing.assert_array_equal(received, [2] * N)
    if mode == "eager":  # rank r sends i + 1 rows to rank i: receives R + 1 rows from everyone
        splits = list(range(1, N + 1))
        y = jnp.full((sum(splits),), R)
        out, received = hvd.alltoall(y, splits=splits, name="a2a_splits")
        np.testing.assert_array_equal(received, [R + 1] * N)
        np.testing.assert_array_equal(out, np.repeat(np.arange(N), R + 1))


@pytest.mark.parametrize("mode", MODES)
def test_prescale_applies_before_the_sum_and_postscale_after(mode):
    # float16 tells them apart (products commute): 60000 on every rank overflows float16's 65504 when summed, so
    # only a prescale of 1/N before the sum stays finite; the same factor as postscale gives inf.
    x = jnp.full((3,), 60000.0, jnp.float16)
    pre = run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=1.0 / N, name="pre16"), x)
    post = run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, postscale_factor=1.0 / N, name="post16"), x)
    np.testing.assert_allclose(np.asarray(pre, np.float64), np.full((3,), 60000.0), rtol=1e-3)
    assert np.isinf(np.asarray(post, np.float64)).all(), post


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", [None, hvd.Sum])
def test_reducescatter_gives_each_rank_its_block(mode, op):
    # op=None: Horovod's default, Average.
    rows = 2 * N + 1  # rank 0 gets one row more
    x = jnp.asarray(np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (R + 1))
    kwargs = {} if op is None else {"op": op}
    out = run(mode, lambda t: hvd.reducescatter(t, name="rs" if op else "rs_avg", **kwargs), x)
    full = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * sum(range(1, N + 1)) / (N if op is None else 1)
    counts = [rows // N + (1 if i < rows % N else 0) for i in range(N)]
    start = sum(counts[:R])
    np.testing.assert_allclose(out, full[start:start + counts[R]])


def test_gradients_through_allreduce_allgather_broadcast_reducescatter():
    # Horovod's gradients (those of tfring.torch): allreduce's is the same reduction of the cotangents; allgather's
    # the cotangents averaged over the ranks, this rank's rows; broadcast's that average on the root, zero
    # elsewhere; reducescatter's the gathered cotangents (Sum: times the set's size).
    x = jnp.arange(3.0) + R
    g = jax.jit(jax.grad(lambda t: jnp.sum(hvd.allreduce(t, op=hvd.Sum, name="gar") * (R + 1))))(x)
    np.testing.assert_allclose(g, np.full(3, sum(range(1, N + 1))))
    w = jnp.arange(3.0 * N).reshape(N, 3) * (R + 1)
    g = jax.grad(lambda t: jnp.sum(hvd.allgather(t, name="gag") * w))(x[None])
    mean_w = np.arange(3.0 * N).reshape(N, 3) * sum(range(1, N + 1)) / N
    np.testing.assert_allclose(g, mean_w[R][None], rtol=1e-6)
    g = jax.grad(lambda t: jnp.sum(hvd.broadcast(t, 0, name="gbc") * (R + 1)))(x)
    np.testing.assert_allclose(g, np.full(3, sum(range(1, N + 1)) / N) if R == 0 else np.zeros(3), rtol=1e-6)
    rows = 2 * N
    g = jax.jit(jax.grad(lambda t: jnp.sum(hvd.reducescatter(t, op=hvd.Sum, name="grs") * (R + 1))))(
        jnp.ones((rows, 2)))
    expected = np.repeat(np.arange(1.0, N + 1), 2)[:, None] * np.ones(2) * N  # rank r's block: (r + 1) * N
    np.testing.assert_allclose(g, expected)
    with pytest.raises(NotImplementedError, match="Sum and Average"):
        jax.grad(lambda t: jnp.sum(hvd.reducescatter(t, op=hvd.Max, name="grs_max")))(jnp.ones((rows, 2)))


def test_a_rank_that_traced_before_names_its_collectives_alike():
    # Rank 0 traces (lowers) the step once more than the others, for another batch size: the names inside a
    # trace are numbered within it, so the real step still matches across ranks.
    step = jax.jit(lambda t: hvd.allreduce(t, op=hvd.Sum) + hvd.allreduce(2 * t, op=hvd.Sum))
    if R == 0:
        step.lower(jnp.ones(5))
    np.testing.assert_array_equal(step(jnp.ones(3)), np.full(3, 3.0 * N))


def test_a_new_trace_never_continues_a_freed_traces_count():
    # Counted by id(trace), a trace allocated where a freed one lived continued its count on one rank only
    # (CI: rank 0 named 'allreduce.noname.2', the others '.1', and the step stalled).
    from tfring.jax import _handles as _ffi

    class Trace:
        parent_trace = None
    first = Trace()
    assert _ffi.auto_name("allreduce", 0, first, "f32[3]").startswith("allreduce.noname.1.")
    del first
    again = Trace()  # usually at the freed one's address
    assert _ffi.auto_name("allreduce", 0, again, "f32[3]").startswith("allreduce.noname.1.")
    if R == 0:  # and on real traces: rank 0 traces (and frees) many more programs before the step
        for n in range(1, 30):
            jax.jit(lambda t: hvd.allreduce(t, op=hvd.Sum)).lower(jnp.ones(n))
    step = jax.jit(lambda t: hvd.allreduce(t, op=hvd.Sum))
    np.testing.assert_array_equal(step(jnp.ones(3)), np.full(3, float(N)))


def test_collectives_in_cond_branches_and_grads_inside_one_jit_number_apart():
    def f(t):  # two branches and a grad, each its own inner trace: numbered within the jit's, none collide
        y = jax.lax.cond(t[0] > 0, lambda v: hvd.allreduce(v, op=hvd.Sum), lambda v: hvd.allreduce(-v, op=hvd.Sum), t)
        z = jax.lax.cond(t[0] > 0, lambda v: hvd.allreduce(2 * v, op=hvd.Sum), lambda v: v, t)
        g = jax.grad(lambda v: jnp.sum(hvd.allreduce(v * v, op=hvd.Sum)))(t)
        return y + z + g
    out = jax.jit(f)(jnp.ones(4))
    np.testing.assert_array_equal(out, np.full(4, 3.0 * N + 2.0 * N))


def test_join_waits_for_steps_still_in_flight():
    step = jax.jit(lambda t, w: hvd.allreduce(t, op=hvd.Sum, name="inflight") + 0 * jnp.tanh(w @ w)[0, 0])
    w = jnp.eye(128)
    step(jnp.ones(2), w).block_until_ready()
    outs = [step(jnp.full((2,), float(s + 1)), w) for s in range(3 if R == 0 else 1)]  # dispatched, not awaited
    if R != 0:  # the others run the two steps rank 0 is still running, then join too
        outs += [step(jnp.full((2,), float(s + 1)), w) for s in (1, 2)]
    hvd.join()
    for s, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.full(2, float(N * (s + 1))))


def test_collectives_in_one_program_run_concurrently_without_deadlock():
    # XLA:CPU runs independent custom calls concurrently, in an order that may differ across ranks; more than
    # 8 calls on buffers over 512 bytes make it do so. Asynchronous handlers must not deadlock.
    xs = [jnp.full((256,), float(i + R)) for i in range(12)]
    outs = jax.jit(lambda *t: [hvd.allreduce(v, op=hvd.Sum, name="many%d" % i) for i, v in enumerate(t)])(*xs)
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.full(256, sum(i + r for r in range(N))))


def test_objects_join_and_barrier():
    assert hvd.allgather_object({"rank": R}) == [{"rank": r} for r in range(N)]
    assert hvd.broadcast_object("from %d" % R, root_rank=N - 1) == "from %d" % (N - 1)
    hvd.barrier()
    if R == 0:
        last = hvd.join()
    else:
        out = hvd.allreduce(jnp.full((2,), 6.0 * N), op=hvd.Average, name="join_avg")
        np.testing.assert_allclose(out, np.full(2, 6.0 * (N - 1)))  # rank 0's zeros count (as Horovod)
        last = hvd.join()
    assert last != 0 or N == 1
    assert hvd.allgather_object(last) == [last] * N


@pytest.mark.skipif(N != 3, reason="ranks 0 and 2 mismatch, rank 1 matches: needs three ranks")
def test_compiled_allgather_with_wrong_sizes_fails_where_wrong_and_never_hangs():
    # Inside jit without sizes=, each rank assumes its peers send as many rows as it does: with 1, 2, 3 rows,
    # rank 1 (assuming 6 of 6) is right, ranks 0 and 2 are not. They fail; rank 1 gets the right rows; nobody
    # waits forever in the transfer.
    f = jax.jit(lambda t: hvd.allgather(t, name="partly_wrong"))
    x = jnp.full((R + 1, 1), float(R))
    if R == 1:
        np.testing.assert_array_equal(f(x)[:, 0], [0, 1, 1, 2, 2, 2])
    else:
        with pytest.raises(Exception, match="compiled program allocated"):
            jax.block_until_ready(f(x))
    np.testing.assert_array_equal(hvd.allreduce(jnp.ones(2), op=hvd.Sum, name="after_wrong"), [N, N])


@pytest.mark.skipif(N < 3, reason="a set whose ranks differ from their global numbers")
@pytest.mark.parametrize("mode", MODES)
def test_set_of_ranks_1_and_2_numbers_rows_roots_and_peers_within_the_set(mode):
    # Set rank = global rank - 1 here: a binding that used global ranks would pick other rows, roots and peers.
    tail = hvd.add_process_set([1, 2])
    try:
        if R in (1, 2):
            s = R - 1
            rows = np.arange(4.0).reshape(4, 1)
            out = run(mode, lambda t: hvd.reducescatter(t, op=hvd.Sum, process_set=tail, name="rs12" + mode),
                      jnp.asarray(rows + 10 * R))
            np.testing.assert_array_equal(out, (2 * rows + 30)[2 * s:2 * s + 2])  # this set rank's block
            b = run(mode, lambda t: hvd.broadcast(t, root_rank=2, process_set=tail, name="bc12" + mode),
                    jnp.full(3, float(R)))
            np.testing.assert_array_equal(b, [2.0] * 3)  # root_rank is a global rank
            a = run(mode, lambda t: hvd.alltoall(t, process_set=tail, name="a2a12" + mode),
                    jnp.asarray([10.0 * R, 10.0 * R + 1]))
            a = a[0] if isinstance(a, tuple) else a
            np.testing.assert_array_equal(a, [10.0 + s, 20.0 + s])  # row j went to set rank j
            weights = jnp.arange(1.0, 5.0).reshape(4, 1)
            grad = run(mode, jax.grad(lambda t: jnp.sum(hvd.allgather(t, process_set=tail, name="ag12" + mode) *
                                                        weights)), jnp.ones((2, 1)))
            np.testing.assert_array_equal(grad, weights[2 * s:2 * s + 2])  # this set rank's rows of the gradient
    finally:
        hvd.remove_process_set(tail)


@pytest.mark.skipif(N < 3, reason="a set of two ranks that is not the global set")
def test_process_set_collectives():
    pair = hvd.add_process_set([0, 1])
    try:
        if R in (0, 1):
            out = jax.jit(lambda t: hvd.allreduce(t, op=hvd.Sum, process_set=pair, name="ps"))(jnp.ones(2) * (R + 1))
            np.testing.assert_array_equal(out, [3.0, 3.0])
            np.testing.assert_array_equal(hvd.allgather(jnp.asarray([R]), process_set=pair), [0, 1])
    finally:
        hvd.remove_process_set(pair)
