"""tfring.torch collectives on a process set added at run time (needs TFRING_DYNAMIC_PROCESS_SETS=1): ranks
[0, N-1] at np >= 3 (a two-rank set with a rank outside it), rank [1] at np=2. Values checked on every rank."""
import pytest
import torch

import tfring.torch as hvd
from torch_helpers import init, value

R, N = init()
MEMBERS = [0, N - 1] if N > 2 else [N - 1]
INSIDE = R in MEMBERS
PS = None


@pytest.fixture(scope="module", autouse=True)
def process_set():
    global PS
    PS = hvd.add_process_set(MEMBERS)
    yield PS
    hvd.barrier()
    assert hvd.remove_process_set(PS)
    assert PS.process_set_id is None


def test_topology():
    assert PS.process_set_id is not None and PS.process_set_id > 0
    assert PS.size() == len(MEMBERS)
    assert PS.rank() == (MEMBERS.index(R) if INSIDE else -1)
    assert PS.included() == INSIDE


def test_collectives_inside_the_set():
    if not INSIDE:
        with pytest.raises(ValueError, match="not in process set"):
            hvd.allreduce(torch.ones(1), process_set=PS)
        return
    me, n = MEMBERS.index(R), len(MEMBERS)
    x = value(R, (n * 2, 3))
    out = hvd.allreduce(x, op=hvd.Sum, process_set=PS)
    torch.testing.assert_close(out, sum(value(r, (n * 2, 3)) for r in MEMBERS))
    out = hvd.allreduce(x, process_set=PS.process_set_id, name="by_id")  # tfring's id spelling, Average
    torch.testing.assert_close(out, sum(value(r, (n * 2, 3)) for r in MEMBERS) / n)
    gathered = hvd.allgather(value(R, (R + 1,)), process_set=PS)
    torch.testing.assert_close(gathered, torch.cat([value(r, (r + 1,)) for r in MEMBERS]))
    # Broadcast roots are global ranks, as in Horovod.
    torch.testing.assert_close(hvd.broadcast(x, MEMBERS[-1], process_set=PS), value(MEMBERS[-1], (n * 2, 3)))
    out, received = hvd.alltoall(x, splits=[2] * n, process_set=PS)
    torch.testing.assert_close(out, torch.cat([value(r, (n * 2, 3))[me * 2:me * 2 + 2] for r in MEMBERS]))
    assert received.tolist() == [2] * n
    scattered = hvd.reducescatter(x, op=hvd.Sum, process_set=PS)
    torch.testing.assert_close(scattered, sum(value(r, (n * 2, 3)) for r in MEMBERS)[me * 2:me * 2 + 2])
    a, b = hvd.grouped_allreduce([x, x[0]], op=hvd.Max, process_set=PS)
    torch.testing.assert_close(b, value(MEMBERS[-1], (n * 2, 3))[0])
    hvd.barrier(process_set=PS)


def test_broadcast_root_outside_the_set_raises_on_every_member():
    outsider = next(r for r in range(N) if r not in MEMBERS)
    if INSIDE:
        with pytest.raises(ValueError, match="not a member"):
            hvd.broadcast(torch.ones(2), outsider, process_set=PS, name="outside_root")


def test_set_gradients_use_the_set_rank():
    if not INSIDE:
        return
    me, n = MEMBERS.index(R), len(MEMBERS)
    x = value(R, (2,)).requires_grad_()
    out = hvd.allgather(x, process_set=PS)
    (out * torch.arange(2.0 * n, dtype=torch.float64)).sum().backward()
    torch.testing.assert_close(x.grad, torch.arange(2.0 * n, dtype=torch.float64)[me * 2:me * 2 + 2])


@pytest.mark.skipif(len(MEMBERS) & (len(MEMBERS) - 1) != 0, reason="Adasum needs a power-of-two set")
def test_adasum_in_the_set():
    if INSIDE:
        ortho = torch.zeros(len(MEMBERS), dtype=torch.float64)
        ortho[MEMBERS.index(R)] = 1.0
        torch.testing.assert_close(hvd.allreduce(ortho, op=hvd.Adasum, process_set=PS),
                                   torch.ones(len(MEMBERS), dtype=torch.float64))


def test_unnamed_collectives_are_numbered_per_set():
    # Members run unnamed collectives in the set that the other ranks never see; the global ones that follow
    # must still get the same names on every rank.
    if INSIDE:
        for _ in range(3):
            hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=PS)
            hvd.allgather(torch.ones(1), process_set=PS)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N
    assert hvd.allgather(torch.ones(1)).shape == (N,)
