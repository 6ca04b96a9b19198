"""Rank script of test_lightning_strategy.py: tfring.spark.lightning.remote.train (the LightningEstimator's rank
function, without Spark) on the Parquet digits at argv[1], with gradient accumulation and clipping, manual
optimization and LBFGS; prints one RESULT line per case and rank."""
import json
import sys

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from tfring.spark.common import data
from tfring.spark.lightning import remote

LR_SGD = 0.01


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self(batch["features"]), batch["label"].long())
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.002)


class Manual(Net):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        optimizer.zero_grad()
        loss = F.cross_entropy(self(batch["features"]), batch["label"].long())
        self.manual_backward(loss)
        optimizer.step()
        self.log("train_loss", loss, on_step=False, on_epoch=True)


class Sgd(Net):
    """Plain SGD, which is not scale-invariant (Adam and LBFGS are: a strategy that sums the ranks' gradients instead
    of averaging them trains them alike). `offset` appears in the loss as offset.sum(): its gradient is exactly 1 on
    every rank, so it moves by -lr per step when gradients are averaged, by -size * lr when summed. `rank_mean` is
    logged with sync_dist=True: every rank must then see the mean of the ranks' values."""

    def __init__(self):
        super().__init__()
        self.offset = torch.nn.Parameter(torch.zeros(3))
        self.steps = 0

    def training_step(self, batch, batch_idx):
        self.steps += 1
        self.log("rank_mean", float(self.global_rank), on_step=False, on_epoch=True, sync_dist=True)
        return super().training_step(batch, batch_idx) + self.offset.sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR_SGD)


class SeenMetrics(pl.Callback):
    """What this rank's trainer holds for rank_mean at each epoch's end (after Lightning's sync_dist reduction)."""

    def __init__(self):
        self.seen = []

    def on_train_epoch_end(self, trainer, module):
        if "rank_mean" in trainer.callback_metrics:
            self.seen.append(float(trainer.callback_metrics["rank_mean"]))


class Lbfgs(Net):
    def configure_optimizers(self):
        return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=3)


root, out = sys.argv[1], sys.argv[2]
units = data.row_group_units(root)
cases = [("automatic", Net(), None), ("manual", Manual(), None),
         ("accumulate", Net(), {"accumulate_grad_batches": 2, "gradient_clip_val": 1.0}), ("lbfgs", Lbfgs(), None),
         ("sgd", Sgd(), None)]
for name, model, trainer_args in cases:
    seen = SeenMetrics()
    spec = dict(model=model, gradient_compression=None, callbacks=[seen], feature_cols=["features"],
                label_cols=["label"],
                sample_weight_col=None, input_shapes=[[-1, 64]], train_units=units, val_units=None,
                train_rows=sum(n for _, _, n in units), val_rows=0, batch_size=32, val_batch_size=32, epochs=2,
                resume_epochs=0, verbose=0, random_seed=1, shuffle=True, train_steps_per_epoch=None,
                validation_steps_per_epoch=None, use_gpu=False, checkpoint_path="%s/%s/checkpoint.ckpt" % (out, name),
                logs_path="%s/%s/logs" % (out, name), trainer_args=trainer_args, logger=None, log_every_n_steps=50,
                terminate_on_nan=True, profiler=None)
    result = remote.train(spec)
    extra = {"offset": model.offset.tolist(), "steps": model.steps, "lr": LR_SGD, "seen": seen.seen} \
        if name == "sgd" else {}
    print("RESULT " + json.dumps(dict({"case": name, "rank": result["rank"], "digest": result["digest"],
                                       "losses": [h["train_loss"] for h in result.get("history") or []]}, **extra)),
          flush=True)
