"""Large out-of-place outputs of tfring.torch come from warm, reused memory (the core's output cache, shared with
TensorFlow): a reused block never leaks stale values, repeated calls do not page-fault in fresh memory, and the
outputs are ordinary tensors (resizable, freed back to the cache)."""
import resource

import torch

import tfring.torch as hvd
from torch_helpers import init

R, N = init()


def rank_values(r, n, it):
    """Integer-valued float32 data, different per rank and iteration (sums are exact in any order)."""
    return ((torch.arange(n) * 7 + r * 13 + it * 5) % 251).to(torch.float32)


def test_reused_outputs_hold_exact_values():
    # Above the cache's 256 KiB floor, one size 1/16 smaller than another (it reuses the larger block), and new
    # values every iteration: a block handed out again must be fully overwritten by each collective.
    for it in range(3):
        for n in (1 << 20, (1 << 20) - (1 << 16), 200_000):
            out = hvd.allreduce(rank_values(R, n, it), op=hvd.Sum, name="pt_reuse_sum")
            assert torch.equal(out, sum(rank_values(r, n, it) for r in range(N)))
            gathered = hvd.allgather(rank_values(R, n // 4 + R, it), name="pt_reuse_gather")  # core-allocated
            assert torch.equal(gathered, torch.cat([rank_values(r, n // 4 + r, it) for r in range(N)]))
            b = hvd.broadcast(rank_values(R, n, it), root_rank=N - 1, name="pt_reuse_bcast")
            assert torch.equal(b, rank_values(N - 1, n, it))
            rows = rank_values(R, N * 70_000, it).reshape(N, -1)
            scattered = hvd.reducescatter(rows, op=hvd.Sum, name="pt_reuse_rs")
            assert torch.equal(scattered, sum(rank_values(r, N * 70_000, it).reshape(N, -1) for r in range(N))[R:R + 1])


def test_repeated_large_allreduce_does_not_fault_in_fresh_pages():
    # Without the cache every 16 MiB output is newly mapped memory: ~1400-4096 page faults per call here.
    x = torch.ones(4 << 20)
    for _ in range(3):
        hvd.allreduce(x, op=hvd.Sum, name="pt_faults")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        out = hvd.allreduce(x, op=hvd.Sum, name="pt_faults")
        del out
    per_call = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
    assert per_call < 256, "%.0f minor page faults per 16 MiB allreduce (4096 pages)" % per_call


def test_freed_output_blocks_are_handed_out_again():
    # The core's background thread drops its reference to an output just after the caller gets it, so a call may
    # find the previous call's block still live: the cache then alternates between two blocks, never a new one.
    from tfring.torch._handles import C as _C
    x = torch.ones(3 << 18)  # 3 MiB: a size no other test uses
    ptrs, before = set(), _C.output_cache_stats()
    for _ in range(8):
        out = hvd.allreduce(x, op=hvd.Sum, name="pt_reuse_ptr")
        ptrs.add(out.data_ptr())
        del out
    after = _C.output_cache_stats()
    assert len(ptrs) <= 2, ptrs
    assert after["hits"] - before["hits"] >= 6 and after["misses"] - before["misses"] <= 2, (before, after)


def test_cached_outputs_are_ordinary_tensors():
    out = hvd.allreduce(torch.ones(1 << 18), op=hvd.Sum, name="pt_resize")
    out.resize_(1 << 20)  # grows through the same allocator
    out[-1] = 7.0
    assert out[0].item() == N and out[-1].item() == 7.0
    out.resize_(10)
    assert torch.equal(out, torch.full((10,), float(N)))
    assert torch.equal(out.clone() * 2, torch.full((10,), 2.0 * N))
    out.untyped_storage().resize_(40)  # reallocated small: torch's own allocator through the cache's
    assert torch.equal(out, torch.full((10,), float(N)))
