"""tfring.torch.DistributedOptimizer(sharded=True) (ZeRO stage 1) and sharded=2 (stage 2) on real ranks: Adam trains
to the single-process weights on the global batch, identical on every rank, while each rank's optimizer holds state
for the parameters it owns only (whole parameters, uneven: 40, 24, 8 and 3 weights), and at stage 2 their reduced
gradients only; clipping by the global norm and a GradScaler's skipped step agree over the ranks; state_dict()
gathers the unsharded layout, which a plain optimizer loads, and which a sharded one loads keeping its own part; bad
arguments fail on every rank."""
import contextlib
import copy

import pytest
import torch

import tfring.torch as hvd
from tfring.torch._sharded import partition
from tfring.torch._sharded_grads import _poison
from ranks_torch_optimizer import (ADAM, STEPS, assert_same_params, batch, global_batch, loss_fn, make_model,
                                   reference, train)

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()


def sharded_adam(model, stage=1, **kwargs):
    return hvd.DistributedOptimizer(ADAM(model.parameters()), named_parameters=model.named_parameters(),
                                    sharded=True if stage == 1 else stage, **kwargs)


@pytest.mark.parametrize("stage", [1, 2])
def test_sharded_adam_trains_to_the_single_process_weights_keeping_only_its_part(stage):
    model = make_model()
    opt = sharded_adam(model, stage)
    assert_same_params(train(opt, model), reference(ADAM))
    held = {p for p in model.parameters() if p.grad is not None}
    assert held == ({p for p in model.parameters() if opt._sharding.owns(p)} if stage == 2 else
                    set(model.parameters())), (R, [tuple(p.shape) for p in held])
    for p in model.parameters():
        assert all(torch.equal(p.detach(), other) for other in hvd.allgather_object(p.detach()))
    owned = {p for p in model.parameters() if opt._sharding.owns(p)}
    assert set(opt.state) == owned and owned, (R, [tuple(p.shape) for p in owned])
    # Every parameter has exactly one owner, and the parts are as balanced as whole parameters allow.
    counts = hvd.allgather_object(sorted(p.numel() for p in owned))
    assert sorted(n for part in counts for n in part) == [3, 8, 24, 40]
    assert counts == ([[40], [3, 8, 24]] if N == 2 else [[40], [24], [3, 8]]), counts


def trained():
    """A model trained with a sharded Adam, and the optimizer's state_dict (the unsharded layout)."""
    model = make_model()
    opt = sharded_adam(model)
    train(opt, model)
    return model, opt.state_dict()


def test_state_dict_is_the_unsharded_layout_at_any_size_and_loads_either_way():
    model, full = trained()
    plain_model = make_model()
    plain = ADAM(plain_model.parameters())
    reference(lambda _: plain, model=plain_model)
    want = plain.state_dict()["state"]
    assert sorted(full["state"]) == sorted(want) == [0, 1, 2, 3]
    for i in want:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(full["state"][i][key], want[i][key], msg=lambda m: "rank %d %d %s: %s" % (
                R, i, key, m))
    # A fresh sharded optimizer keeps its own part of the unsharded layout; one more step matches the plain one.
    model2 = make_model()  # (a second optimizer on `model` would reduce its gradients twice: hooks on both)
    model2.load_state_dict(model.state_dict())
    again = sharded_adam(model2)
    again.load_state_dict(copy.deepcopy(full))  # (torch loads the tensors themselves: its step would change `full`)
    again.zero_grad()
    loss_fn(model2, *batch(9, R)).backward()
    again.step()
    # Kept whole until the step (an elastic rollback loads before the job shrinks), then only this rank's part.
    assert set(again.state) == {p for p in model2.parameters() if again._sharding.owns(p)}
    plain.load_state_dict(full)
    plain.zero_grad()
    x, y = zip(*[batch(9, r) for r in range(N)])
    loss_fn(plain_model, torch.cat(x), torch.cat(y)).backward()
    plain.step()
    assert_same_params(model2, plain_model)


def test_a_checkpoint_loaded_on_rank_0_alone_reaches_every_part_by_broadcast_optimizer_state():
    # Horovod's pattern: rank 0 loads, broadcast_optimizer_state hands the rest out; each rank keeps its part.
    model, full = trained()
    model2 = make_model()
    model2.load_state_dict(model.state_dict())
    again = sharded_adam(model2)
    if R == 0:
        again.load_state_dict(copy.deepcopy(full))
    hvd.broadcast_optimizer_state(again, root_rank=0)
    owned = {p for p in model2.parameters() if again._sharding.owns(p)}
    assert set(again.state) == owned
    got = again.state_dict()["state"]
    for i in full["state"]:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(got[i][key], full["state"][i][key])
    with pytest.raises(ValueError, match=r"root_rank 7 is not a rank of the sharded optimizer's set"):
        hvd.broadcast_optimizer_state(again, root_rank=7)


@pytest.mark.parametrize("stage", [1, 2])
def test_grad_scaler_skips_a_step_that_overflowed_on_one_rank_everywhere_and_matches_one_process(stage):
    # Horovod's AMP recipe: synchronize, unscale, step inside skip_synchronize. At step 1 rank 0's gradient of the
    # last bias alone overflows: the reduced gradient is non-finite in that parameter only, which one rank owns. At
    # stage 1 every rank holds it; at stage 2 only its owner does, and the set agrees that it is non-finite, so every
    # rank skips that step and halves its scale; the other steps match one process with the same overflow.
    dt, poisoned = torch.float32, 1

    def scaled_step(opt, scaler, model, x, y, sync):
        opt.zero_grad()
        scaler.scale(loss_fn(model, x, y)).backward()
        if sync:
            opt.synchronize()
        scaler.unscale_(opt)
        with opt.skip_synchronize() if sync else contextlib.nullcontext():
            scaler.step(opt)
        scaler.update()

    def overflow(bias, now):
        bias.register_hook(lambda g: g * float("inf") if now() else g)
    model, ref = make_model(dtype=dt), make_model(dtype=dt)
    opt, ref_opt = sharded_adam(model, stage), ADAM(ref.parameters())
    scaler, ref_scaler = (torch.amp.GradScaler("cpu", init_scale=2.0 ** 8) for _ in range(2))
    step = 0
    if R == 0:
        overflow(model[2].bias, lambda: step == poisoned)
    overflow(ref[2].bias, lambda: step == poisoned)
    for step in range(STEPS):
        scaled_step(opt, scaler, model, *batch(step, R, dtype=dt), True)
        scaled_step(ref_opt, ref_scaler, ref, *global_batch(step, dtype=dt), False)
        assert scaler.get_scale() == ref_scaler.get_scale() == 2.0 ** 8 * (0.5 if step >= poisoned else 1), step
    assert_same_params(model, ref, rtol=1e-5, atol=1e-6)
    for p in model.parameters():
        assert torch.isfinite(p).all() and all(torch.equal(p.detach(), o) for o in hvd.allgather_object(p.detach()))


def test_stage_2_accumulates_passes_like_one_process():
    # backward_passes_per_step=2: the passes add up locally (as unsharded), one allreduce, then only owned gradients.
    model = make_model()
    opt = sharded_adam(model, 2, backward_passes_per_step=2)
    ref = make_model()
    ref_opt = ADAM(ref.parameters())
    for step in range(STEPS):
        opt.zero_grad()
        ref_opt.zero_grad()
        for k in range(2):
            loss_fn(model, *batch(10 * step + k, R)).backward()
            loss_fn(ref, *global_batch(10 * step + k)).backward()
        opt.step()
        ref_opt.step()
        assert all((p.grad is not None) == opt._sharding.owns(p) for p in model.parameters()), (R, step)
    assert_same_params(model, ref)


def test_frozen_parameters_weigh_nothing_in_the_ownership():
    # A frozen parameter (no gradient, no state) larger than all the others must not leave a rank without a
    # trainable one: the trainable ones are shared out as if it were not there.
    model = make_model()
    frozen = torch.nn.Parameter(torch.zeros(1000, dtype=torch.float64), requires_grad=False)
    owner = partition([frozen] + list(model.parameters()), list(range(N)))
    assert {p: r for p, r in owner.items() if p is not frozen} == partition(list(model.parameters()), list(range(N)))


def test_the_non_finite_mark_lands_in_a_channels_last_gradient():
    # (No collective.) A rank that must mark its owned gradients as non-finite writes one NaN, whatever their layout.
    p = torch.nn.Parameter(torch.zeros(2, 3, 4, 5))
    p.grad = torch.ones(2, 3, 4, 5).to(memory_format=torch.channels_last)
    _poison([p])
    assert int(torch.isnan(p.grad).sum()) == 1 and p.grad.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("stage", [0, 2])
def test_clip_grad_norm_clips_by_the_norm_of_every_reduced_gradient(stage):
    # At stage 2 torch's own function would see this rank's part of the gradients; the optimizer's sums the parts.
    model, ref = make_model(), make_model()
    opt = sharded_adam(model, stage) if stage else hvd.DistributedOptimizer(
        ADAM(model.parameters()), named_parameters=model.named_parameters())
    ref_opt = ADAM(ref.parameters())
    for step in range(STEPS):
        opt.zero_grad()
        ref_opt.zero_grad()
        loss_fn(model, *batch(step, R)).backward()
        loss_fn(ref, *global_batch(step)).backward()
        norm = opt.clip_grad_norm_(0.05)
        want = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05)
        assert want > 0.05, want  # (so that it clips)
        torch.testing.assert_close(norm, want.to(norm.dtype), msg=lambda m: "rank %d step %d: %s" % (R, step, m))
        if step % 2:
            with opt.skip_synchronize():
                opt.step()
        else:  # Horovod warns, and synchronizes again: harmless, at stage 2 too
            with pytest.warns(UserWarning, match="without optimizer.skip_synchronize"):
                opt.step()
        ref_opt.step()
    assert_same_params(model, ref)
    inf_norm = opt.clip_grad_norm_(1e9, norm_type="inf")  # (a no-op clip: the largest reduced gradient value)
    assert all(float(v) == float(inf_norm) for v in hvd.allgather_object(inf_norm)), R


def test_bad_arguments_fail_on_every_rank():
    model = make_model()
    with pytest.raises(ValueError, match=r"sharded=3 must be False, True or 1 \(ZeRO stage 1\), or 2"):
        hvd.DistributedOptimizer(ADAM(model.parameters()), sharded=3)
    with pytest.raises(ValueError, match=r"sharded=2 does not combine with groups=2"):
        hvd.DistributedOptimizer(ADAM(model.parameters()), sharded=2, groups=2)
    with pytest.raises(ValueError, match=r"sharded=2 does not combine with compression=.*PowerSGD"):
        hvd.DistributedOptimizer(ADAM(model.parameters()), sharded=2, compression=hvd.Compression.powersgd(1))
    with pytest.raises(ValueError, match=r"sharded=1 does not combine with op=Adasum"):
        hvd.DistributedOptimizer(ADAM(model.parameters()), sharded=True, op=hvd.Adasum)
