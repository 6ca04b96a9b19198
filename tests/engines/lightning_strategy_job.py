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


class Lbfgs(Net):
    def configure_optimizers(self):
        return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=3)


root, out = sys.argv[1], sys.argv[2]
units = data.row_group_units(root)
cases = [("automatic", Net(), None), ("manual", Manual(), None),
         ("accumulate", Net(), {"accumulate_grad_batches": 2, "gradient_clip_val": 1.0}), ("lbfgs", Lbfgs(), None)]
for name, model, trainer_args in cases:
    spec = dict(model=model, gradient_compression=None, callbacks=[], feature_cols=["features"], label_cols=["label"],
                sample_weight_col=None, input_shapes=[[-1, 64]], train_units=units, val_units=None,
                train_rows=sum(n for _, _, n in units), val_rows=0, batch_size=32, val_batch_size=32, epochs=2,
                resume_epochs=0, verbose=0, random_seed=1, shuffle=True, train_steps_per_epoch=None,
                validation_steps_per_epoch=None, use_gpu=False, checkpoint_path="%s/%s/checkpoint.ckpt" % (out, name),
                logs_path="%s/%s/logs" % (out, name), trainer_args=trainer_args, logger=None, log_every_n_steps=50,
                terminate_on_nan=True, profiler=None)
    result = remote.train(spec)
    print("RESULT " + json.dumps({"case": name, "rank": result["rank"], "digest": result["digest"],
                                  "losses": [h["train_loss"] for h in result.get("history") or []]}), flush=True)
