"""The function every rank of a TorchEstimator fit runs: rebuild the model and optimizer, read its shard, train.

The loop keeps Horovod's contract for `train_minibatch_fn`: it is called once per batch as
`train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights,
backward_passes_per_step, batch_idx)` and returns (outputs, loss); it steps the optimizer at the start of every
`backward_passes_per_step`-th batch but the first, and the loop steps once more after the epoch's last batch.
"""
import copy
import math
import os

import numpy as np

from tfring.spark.common.job import weights_digest

__all__ = ["train", "train_minibatch", "scale_lr", "index_batches", "to_cpu"]


def train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights,
                    backward_passes_per_step, batch_idx):
    """One batch of the default training loop (Horovod's `train_minibatch_fn` contract).

    Args:
        model: the torch module.
        optimizer: the DistributedOptimizer.
        transform_outputs: (outputs, labels) -> (list of outputs, labels reshaped to them).
        loss_fn: (outputs, labels, sample_weights) -> the weighted loss.
        inputs: list of input tensors, one per feature column.
        labels: list of label tensors, one per label column.
        sample_weights: the batch's sample weights, or None.
        backward_passes_per_step: batches whose gradients are accumulated before a step.
        batch_idx: the batch's index in the epoch.

    Returns:
        tuple: (outputs, loss).
    """
    if batch_idx % backward_passes_per_step == 0:
        if batch_idx:
            optimizer.step()
        optimizer.zero_grad()
    outputs, labels = transform_outputs(model(*inputs), labels)
    loss = loss_fn(outputs, labels, sample_weights)
    if backward_passes_per_step > 1:
        loss = loss / float(backward_passes_per_step)
    loss.backward()
    return outputs, loss


def scale_lr(optimizer_state, factor):
    """A copy of an optimizer state_dict whose param groups' numeric learning rates are multiplied by factor.

    Args:
        optimizer_state: `optimizer.state_dict()`.
        factor: the factor (num_proc on the ranks, 1 / num_proc for the checkpoint).

    Returns:
        dict: the new state_dict (the per-parameter state is shared, not copied).
    """
    state = dict(optimizer_state)
    state["param_groups"] = [dict(g) for g in optimizer_state["param_groups"]]
    for group in state["param_groups"]:
        if isinstance(group.get("lr"), (int, float)):
            group["lr"] = group["lr"] * factor
    return state


def _transform_outputs(outputs, labels):
    """Outputs as a list; each label reshaped to its output's shape when they hold as many values (Horovod's)."""
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    labels = [lb.reshape(out.shape) if hasattr(out, "shape") and out.shape.numel() == lb.numel() else lb
              for out, lb in zip(outputs, labels)]
    return list(outputs), labels


def _loss_fn(loss_fns, loss_weights):
    def loss_fn(outputs, labels, sample_weights):
        total = 0
        for out, lb, fn, weight in zip(outputs, labels, loss_fns, loss_weights):
            if sample_weights is None:
                total = total + fn(out, lb) * weight
            else:  # as Horovod: per-row losses times the weights, then their mean
                total = total + (fn(out, lb, reduction="none").flatten() * sample_weights).mean() * weight
        return total
    return loss_fn


class _Tally:
    """Row-weighted sums of the loss and metrics of one epoch on this rank; `averages` sums them over ranks."""

    def __init__(self, metric_groups, label_cols):
        self.metric_groups, self.label_cols = metric_groups, label_cols
        self.sums = np.zeros(1 + sum(len(label_cols) for _ in metric_groups), dtype=np.float64)
        self.rows = 0

    def update(self, loss, outputs, labels, rows):
        values = [float(loss)]
        for group in self.metric_groups:
            fns = group * len(outputs) if len(group) == 1 else group
            values += [float(fn(out.detach(), lb)) for fn, out, lb in zip(fns, outputs, labels)]
        self.sums += np.asarray(values) * rows
        self.rows += rows

    def averages(self, hvd, torch, name):
        total = torch.tensor(np.append(self.sums, self.rows), dtype=torch.float64)
        total = hvd.allreduce(total, op=hvd.Sum, name=name).numpy()
        avg = total[:-1] / max(total[-1], 1.0)
        metrics, i = [], 1
        for g in range(len(self.metric_groups)):
            metrics.append({"group_%d_%s" % (g, c): float(avg[i + j]) for j, c in enumerate(self.label_cols)})
            i += len(self.label_cols)
        return {"loss": float(avg[0]), "all_metrics": metrics}


def _load(spec, units, rank, size, torch, device):
    """This rank's shard as tensors: (inputs per feature column, labels per label column, weights or None, rows)."""
    from tfring.spark.common import data
    weight_col = spec["sample_weight_col"]
    cols = spec["feature_cols"] + spec["label_cols"] + ([weight_col] if weight_col else [])
    table = data.read_shard(units, rank, size, cols)

    def tensor(name):
        return torch.from_numpy(data.column_to_numpy(table, name).astype(np.float32)).to(device)
    inputs = [tensor(c).reshape(s) for c, s in zip(spec["feature_cols"], spec["input_shapes"])]
    labels = [tensor(c) for c in spec["label_cols"]]  # float32, as Horovod's (a class-index loss calls .long())
    return inputs, labels, tensor(weight_col) if weight_col else None, table.num_rows


def index_batches(rows, batch_size, shuffle, generator, torch):
    """Endless index batches: successive (shuffled) passes over the rows, cut into full batches.

    Args:
        rows: the number of rows.
        batch_size: rows per batch.
        shuffle: a new random order for every pass (else the rows in order).
        generator: the torch.Generator of the orders.
        torch: the torch module.

    Yields:
        torch.Tensor: the row indices of each batch.
    """
    pending = torch.arange(0)
    while True:
        while len(pending) < batch_size:
            order = torch.randperm(rows, generator=generator) if shuffle else torch.arange(rows)
            pending = torch.cat([pending, order])
        yield pending[:batch_size]
        pending = pending[batch_size:]


def _pick(tensors, index):
    return [t[index] for t in tensors]


def to_cpu(torch, value):
    """Tensors inside dicts/lists/tuples moved to the CPU (a driver without a GPU unpickles the checkpoint).

    Args:
        torch: the torch module.
        value: a tensor, or dicts/lists/tuples holding tensors (anything else is returned as it is).

    Returns:
        The same structure with detached CPU tensors.
    """
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: to_cpu(torch, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(torch, v) for v in value)
    return value


def _save_checkpoint(torch, model, optimizer, size, path):
    state = to_cpu(torch, {"model": model.state_dict(), "optimizer": scale_lr(optimizer.state_dict(), 1.0 / size)})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)  # readers never see half a checkpoint
    return state


def train(spec):
    """Trains on this rank's shard and returns what the driver needs.

    Args:
        spec: the job description TorchEstimator._fit builds.

    Returns:
        dict: rank, size, rows (this rank's training rows), steps (per epoch) and digest (of the final
        state_dict) on every rank; rank 0 adds state ({'model', 'optimizer'}: the checkpoint) and history.
    """
    import torch

    import tfring.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    seed = spec["random_seed"]
    if seed is not None:
        torch.manual_seed(seed)
    device = torch.device("cpu")
    if spec["use_gpu"] and torch.cuda.is_available():
        device = torch.device("cuda", hvd.local_rank())
        torch.cuda.set_device(device)
    model = spec["model"].to(device)
    if spec["model_state"] is not None:
        model.load_state_dict(spec["model_state"])
    optimizer = spec["optimizer_cls"](model.parameters(), lr=1)  # lr and the rest come with the state
    optimizer.load_state_dict(scale_lr(copy.deepcopy(spec["optimizer_state"]), size))  # Horovod: lr x size
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0, model=model)
    kwargs = {"compression": spec["gradient_compression"]} if spec["gradient_compression"] is not None else {}
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         backward_passes_per_step=spec["backward_passes_per_step"], **kwargs)
    loss_fns = spec["loss_fns"] or [ctor() for ctor in spec["loss_constructors"]]
    loss_fns = loss_fns * len(spec["label_cols"]) if len(loss_fns) == 1 else loss_fns
    loss_fn = _loss_fn(loss_fns, spec["loss_weights"])
    minibatch = spec["train_minibatch_fn"] or train_minibatch
    callbacks = list(spec["callbacks"] or [])
    for cb in callbacks:
        if hasattr(cb, "set_model"):
            cb.set_model(model)

    inputs, labels, weights, rows = _load(spec, spec["train_units"], rank, size, torch, device)
    steps = spec["train_steps_per_epoch"] or max(1, math.floor(spec["train_rows"] / spec["batch_size"] / size))
    generator = torch.Generator().manual_seed((seed if seed is not None else 0) * 1000 + rank)
    batches = index_batches(rows, spec["batch_size"], spec["shuffle"], generator, torch)
    val = _load(spec, spec["val_units"], rank, size, torch, device) if spec["val_units"] else None
    history, state = [], None
    for epoch in range(spec["epochs"]):
        model.train()
        tally = _Tally(spec["metrics"], spec["label_cols"])
        for batch_idx in range(steps):
            index = next(batches).to(device)
            w = weights[index] if weights is not None else None
            outputs, loss = minibatch(model, optimizer, _transform_outputs, loss_fn, _pick(inputs, index),
                                      _pick(labels, index), w, spec["backward_passes_per_step"], batch_idx)
            outputs, batch_labels = _transform_outputs(outputs, _pick(labels, index))
            tally.update(loss.detach(), outputs, batch_labels, len(index))
        optimizer.step()
        entry = {"epoch": epoch, "train": tally.averages(hvd, torch, "tfring.spark.train_metrics")}
        if val is not None:
            entry["validation"] = _validate(spec, model, loss_fn, val, torch, hvd)
        history.append(entry)
        if rank == 0:
            state = _save_checkpoint(torch, model, optimizer, size, spec["checkpoint_path"])
            if spec["verbose"]:
                print("epoch %d/%d: %s" % (epoch + 1, spec["epochs"], _summary(entry)), flush=True)
        for cb in callbacks:
            cb.on_epoch_end(epoch, entry)

    result = {"rank": rank, "size": size, "rows": rows, "steps": steps,
              "digest": weights_digest([v.detach().cpu().numpy() for v in model.state_dict().values()])}
    if rank == 0:
        result.update(state=state, history=history)
    return result


def _summary(entry):
    """One line of an epoch's history entry: 'train loss 0.1234 group_0_label 0.9500, validation loss ...'."""
    parts = []
    for stage in ("train", "validation"):
        if stage in entry:
            values = [("loss", entry[stage]["loss"])] + [kv for g in entry[stage]["all_metrics"] for kv in g.items()]
            parts.append(stage + " " + " ".join("%s %.4f" % kv for kv in values))
    return ", ".join(parts)


def _validate(spec, model, loss_fn, val, torch, hvd):
    """Each rank evaluates its validation shard (or validation_steps_per_epoch batches of it); averaged over ranks."""
    inputs, labels, weights, rows = val
    batch = spec["val_batch_size"]
    limit = spec["validation_steps_per_epoch"] or math.ceil(rows / batch)
    tally = _Tally(spec["metrics"], spec["label_cols"])
    model.eval()
    with torch.no_grad():
        for step in range(limit):
            start = (step * batch) % rows
            index = torch.arange(start, min(start + batch, rows), device=inputs[0].device)
            outputs, batch_labels = _transform_outputs(model(*_pick(inputs, index)), _pick(labels, index))
            loss = loss_fn(outputs, batch_labels, weights[index] if weights is not None else None)
            tally.update(loss, outputs, batch_labels, len(index))
    return tally.averages(hvd, torch, "tfring.spark.val_metrics")
