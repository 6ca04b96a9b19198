"""PyTorch Lightning 2.x on a Spark DataFrame: tfring.spark.lightning.LightningEstimator fits a LightningModule on
scikit-learn's digits with 2 ranks (Spark tasks, each running Lightning's Trainer with the tfring strategy), then
the returned LightningModel predicts the held-out rows. horovod.spark.lightning's recipe with the import changed
(its `TorchEstimator` name works too), on the Lightning users have now.

    python examples/spark_lightning_digits.py              # Spark local[2], bound to 127.0.0.1
    python examples/spark_lightning_digits.py --master spark://host:7077 --store /shared/dir --num-proc 4

A cluster needs a --store every executor sees at the same path (e.g. NFS).
"""
import argparse
import os
import sys

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from pyspark.ml.functions import array_to_vector
from pyspark.sql import SparkSession
from sklearn.datasets import load_digits

from tfring.spark.lightning import LightningEstimator, Store  # was: from horovod.spark.lightning import ...

parser = argparse.ArgumentParser()
parser.add_argument("--master", default="local[2]")
parser.add_argument("--num-proc", type=int, default=2)
parser.add_argument("--epochs", type=int, default=12)
parser.add_argument("--store", default=None, help="directory for the Parquet data and checkpoints (default: temp)")
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if held-out accuracy is lower")
args = parser.parse_args()

builder = SparkSession.builder.master(args.master).appName("tfring-spark-lightning-digits")
if args.master.startswith("local"):  # stay on loopback; the workers use this Python
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")

digits = load_digits()
rows = [(i, (digits.data[i] / 16.0).tolist(), int(digits.target[i])) for i in range(len(digits.target))]
df = spark.createDataFrame(rows, "id long, pixels array<double>, label long")
df = df.withColumn("features", array_to_vector("pixels"))  # ML vectors work as well as arrays
train, test = df.filter("id % 5 != 0"), df.filter("id % 5 = 0")


class Net(pl.LightningModule):
    """A small CNN; defined in __main__, it travels to the ranks by value (cloudpickle). Batches are dicts of
    column tensors (Horovod's Lightning format); labels arrive as float32."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.fc1 = torch.nn.Linear(16 * 8 * 8, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv(x)).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self(batch["features"]), batch["label"].long())
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        output = self(batch["features"])
        self.log("val_loss", F.cross_entropy(output, batch["label"].long()), sync_dist=True)
        self.log("val_acc", (output.argmax(1) == batch["label"].long()).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.001)  # x num_proc on the ranks


torch.manual_seed(1)
estimator = LightningEstimator(
    num_proc=args.num_proc, model=Net(), input_shapes=[[-1, 1, 8, 8]],  # each row's 64 values, reshaped
    feature_cols=["features"], label_cols=["label"], batch_size=32, epochs=args.epochs, validation=0.1,
    verbose=1, random_seed=1, store=Store.create(args.store) if args.store else None,
    backend_env={"OMP_NUM_THREADS": "1"})
lightning_model = estimator.fit(train).setOutputCols(["label_prob"])
last = lightning_model.getHistory()[-1]
print("last epoch: train loss %.4f, validation loss %.4f, validation accuracy %.4f"
      % (last["train_loss"], last["val_loss"], last["val_acc"]))

predictions = lightning_model.transform(test).select("label", "label_prob").toPandas()
predicted = np.stack(predictions["label_prob"].to_numpy()).argmax(axis=1)
held_out = float((predicted == predictions["label"].to_numpy()).mean())
print("held-out accuracy %.4f on %d rows (%d ranks)" % (held_out, len(predictions), args.num_proc))
spark.stop()
if args.target_accuracy is not None and held_out < args.target_accuracy:
    raise SystemExit("held-out accuracy %.4f below target %.4f" % (held_out, args.target_accuracy))
