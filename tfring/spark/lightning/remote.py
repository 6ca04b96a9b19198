"""The function every rank of a LightningEstimator fit runs: its shard as batches of dicts, a Lightning Trainer on
the tfring strategy, rank 0's checkpoint in the store after every epoch, and the history averaged over the ranks.

Batches are what Horovod's Lightning data module gives `training_step`: a dict with one float32 tensor per feature
column (shaped by input_shapes), label column and sample weight column.
"""
import logging
import math
import os

import numpy as np

from tfring.spark.common.job import weights_digest

__all__ = ["train", "lightning_package"]


def lightning_package(model):
    """The Lightning package whose LightningModule `model` is (`lightning.pytorch` or `pytorch_lightning`).

    Args:
        model: any object.

    Returns:
        The package module, or None when `model` is no LightningModule (or Lightning is not loaded).
    """
    import sys
    for name in ("lightning.pytorch", "pytorch_lightning"):
        pl = sys.modules.get(name)  # a LightningModule's package is imported already: nothing is imported here
        if pl is not None and isinstance(model, getattr(pl, "LightningModule", ())):
            return pl
    return None


class _Batches:
    """An iterable of `steps` dict batches per pass (Lightning calls iter() once per epoch).

    Training: full batches of shuffled rows, the order going on across epochs. Validation (`index_batches` None):
    the shard in order, cut into `steps` batches, the last one taking the remaining rows.
    """

    def __init__(self, columns, rows, batch_size, steps, index_batches=None):
        self.columns, self.rows, self.batch_size, self.steps = columns, rows, batch_size, steps
        self.index_batches = index_batches

    def __len__(self):
        return self.steps

    def __iter__(self):
        import torch
        for step in range(self.steps):
            if self.index_batches is not None:
                index = next(self.index_batches)
            else:
                start = min(step * self.batch_size, self.rows - 1)
                end = self.rows if step == self.steps - 1 else min(start + self.batch_size, self.rows)
                index = torch.arange(start, end)
            yield {name: tensor[index] for name, tensor in self.columns.items()}


def _load(spec, units, rank, size, torch):
    """This rank's shard: ({column: float32 tensor}, rows); features shaped by the input shapes."""
    from tfring.spark.common import data
    cols = spec["feature_cols"] + spec["label_cols"] + ([spec["sample_weight_col"]] if spec["sample_weight_col"]
                                                        else [])
    table = data.read_shard(units, rank, size, cols)
    shapes = dict(zip(spec["feature_cols"], spec["input_shapes"]))
    out = {}
    for name in cols:
        tensor = torch.from_numpy(data.column_to_numpy(table, name).astype(np.float32))
        out[name] = tensor.reshape(shapes[name]) if name in shapes else tensor
    return out, table.num_rows


def _callbacks(pl, hvd, torch, spec, history, checkpoint_path):
    """The estimator's own callbacks: history (averaged over ranks), rank 0's checkpoint, NaN check, summaries."""

    class _Tfring(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if spec["terminate_on_nan"]:  # the weights are identical on every rank: all of them stop together
                for name, p in module.named_parameters():
                    if not torch.isfinite(p).all():
                        raise ValueError("terminate_on_nan: parameter %s is not finite after step %d"
                                         % (name, trainer.global_step))

        def on_train_epoch_end(self, trainer, module):
            local = {k: float(v) for k, v in sorted(trainer.callback_metrics.items())
                     if isinstance(v, (int, float)) or (hasattr(v, "numel") and v.numel() == 1)}
            gathered = hvd.allgather_object(local, name="tfring.lightning.history")
            keys = sorted(set().union(*gathered))
            entry = {"epoch": trainer.current_epoch}
            for k in keys:
                values = [g[k] for g in gathered if k in g]
                entry[k] = float(np.mean(values))
            history.append(entry)
            trainer.save_checkpoint(checkpoint_path, weights_only=False)  # every rank calls it; rank 0 writes
            if spec["verbose"] and hvd.rank() == 0:
                print("epoch %d: %s" % (trainer.current_epoch + 1, " ".join(
                    "%s %.4f" % (k, v) for k, v in entry.items() if k != "epoch")), flush=True)

    return [_Tfring()]


def _with_dirpath(pl, callbacks, run_path):
    """A user's ModelCheckpoint without a directory writes into the run's directory of the store (as Horovod)."""
    for cb in callbacks:
        if isinstance(cb, pl.callbacks.ModelCheckpoint) and cb.dirpath is None:
            cb.dirpath = run_path
    return callbacks


def train(spec):
    """Trains the LightningModule on this rank's shard and returns what the driver needs.

    Args:
        spec: the job description LightningEstimator._fit builds.

    Returns:
        dict: rank, size, rows (this rank's training rows), steps (per epoch) and digest (of the final state_dict)
        on every rank; rank 0 adds state (the module's state_dict on the CPU) and history.
    """
    import torch

    import tfring.torch as hvd
    from tfring.spark.lightning.strategy import make_strategy
    from tfring.spark.torch.remote import index_batches, to_cpu

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    model = spec["model"]
    pl = lightning_package(model)
    pl.utilities.rank_zero.rank_zero_only.rank = rank  # loggers and prints on rank 0 only, from the start
    if not spec["verbose"]:  # Lightning's info lines ("GPU available: ...") on stderr
        logging.getLogger(pl.__name__).setLevel(logging.WARNING)
    seed = spec["random_seed"]
    if seed is not None:
        pl.seed_everything(seed, verbose=False)
    device = torch.device("cpu")
    accelerator = "cpu"
    if spec["use_gpu"] and torch.cuda.is_available():
        device, accelerator = torch.device("cuda", hvd.local_rank()), "gpu"
        torch.cuda.set_device(device)

    columns, rows = _load(spec, spec["train_units"], rank, size, torch)
    steps = spec["train_steps_per_epoch"] or max(1, math.floor(spec["train_rows"] / spec["batch_size"] / size))
    generator = torch.Generator().manual_seed((seed if seed is not None else 0) * 1000 + rank)
    train_batches = _Batches(columns, rows, spec["batch_size"], steps,
                             index_batches(rows, spec["batch_size"], spec["shuffle"], generator, torch))
    val_batches = None
    if spec["val_units"]:
        val_columns, val_rows = _load(spec, spec["val_units"], rank, size, torch)
        val_batch = spec["val_batch_size"]
        val_steps = spec["validation_steps_per_epoch"] or max(1, math.ceil((spec["val_rows"] // size) / val_batch))
        val_batches = _Batches(val_columns, val_rows, val_batch, val_steps)

    history = []
    callbacks = _with_dirpath(pl, list(spec["callbacks"] or []), os.path.dirname(spec["checkpoint_path"]))
    has_checkpointing = any(isinstance(cb, pl.callbacks.ModelCheckpoint) for cb in callbacks)
    logs_path = spec["logs_path"]
    os.makedirs(logs_path, exist_ok=True)
    kwargs = dict(accelerator=accelerator, devices=1, strategy=make_strategy(pl, hvd, device,
                                                                             spec["gradient_compression"]),
                  max_epochs=spec["epochs"] + spec["resume_epochs"], num_sanity_val_steps=0,
                  callbacks=callbacks + _callbacks(pl, hvd, torch, spec, history, spec["checkpoint_path"]),
                  logger=spec["logger"] if spec["logger"] is not None else True,
                  log_every_n_steps=spec["log_every_n_steps"], default_root_dir=logs_path,
                  enable_checkpointing=has_checkpointing, enable_progress_bar=False,
                  enable_model_summary=bool(spec["verbose"]), use_distributed_sampler=False,
                  profiler=spec["profiler"], limit_val_batches=1.0 if val_batches is not None else 0)
    kwargs.update(spec["trainer_args"] or {})
    trainer = pl.Trainer(**kwargs)
    resume = spec["checkpoint_path"] if spec["resume_epochs"] else None
    trainer.fit(model, train_dataloaders=train_batches, val_dataloaders=val_batches, ckpt_path=resume)

    state = to_cpu(torch, model.state_dict())
    result = {"rank": rank, "size": size, "rows": rows, "steps": steps,
              "digest": weights_digest([v.numpy() for v in state.values()])}
    if rank == 0:
        result.update(state=state, history=history)
    return result
