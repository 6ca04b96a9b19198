"""Elastic PyTorch on Spark tasks: tfring.spark.run_elastic trains on scikit-learn's digits (no download) with
Horovod's elastic recipe (TorchState + ElasticSampler). max_num_proc tasks are submitted and the job starts on
num_proc of them; a task that dies shrinks the job (the survivors roll back to the last commit), and its retry
(local[N,F]: up to F tries a task) or a task that starts later joins at the next commit.

    python examples/spark_elastic_digits.py                # local[3,4]: 2 ranks to start, up to 3, at least 1
    python examples/spark_elastic_digits.py --master spark://host:7077 --num-proc 4 --max-num-proc 8
"""
import argparse
import os
import sys

from pyspark.sql import SparkSession

import tfring.spark  # was: import horovod.spark

parser = argparse.ArgumentParser()
parser.add_argument("--master", default="local[3,4]", help="local[N,F]: N cores, F tries per task")
parser.add_argument("--num-proc", type=int, default=2)
parser.add_argument("--min-num-proc", type=int, default=1)
parser.add_argument("--max-num-proc", type=int, default=3)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="single-rank learning rate (scaled by size)")
parser.add_argument("--batches-per-commit", type=int, default=5, help="work lost at most when a task dies")
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if validation accuracy is lower")
args = parser.parse_args()


def train(epochs, batch_size, lr, batches_per_commit):
    """Runs in every rank (a process each Spark task starts); cloudpickled, so it imports what it needs."""
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    import tfring.torch as hvd  # was: import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    digits = load_digits()
    xs, xv, ys, yv = train_test_split(digits.data / 16.0, digits.target, test_size=0.2, random_state=0,
                                      stratify=digits.target)
    x_train, x_val = torch.tensor(xs, dtype=torch.float32), torch.tensor(xv, dtype=torch.float32)
    y_train, y_val = torch.tensor(ys), torch.tensor(yv)
    train_set = torch.utils.data.TensorDataset(x_train, y_train)
    sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True, seed=0)  # re-shards what is left after a reset
    loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, sampler=sampler)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=lr * hvd.size()),
                                         named_parameters=model.named_parameters())

    def validation_accuracy():
        model.eval()
        with torch.no_grad():
            x, y = x_val[hvd.rank()::hvd.size()], y_val[hvd.rank()::hvd.size()]
            counts = torch.tensor([(model(x).argmax(1) == y).sum().item(), len(y)], dtype=torch.float64)
        correct, total = hvd.allreduce(counts, op=hvd.Sum, name="val_counts").tolist()
        return correct / total

    @hvd.elastic.run
    def loop(state):  # called again after every reset, from the last commit
        while state.epoch < epochs:
            model.train()
            for i, (xb, yb) in enumerate(loader):
                optimizer.zero_grad()
                F.cross_entropy(model(xb), yb).backward()
                optimizer.step()
                state.sampler.record_batch(i, batch_size)
                if (i + 1) % batches_per_commit == 0:
                    state.commit()  # also where tasks started (or retried) since join
            state.accuracy = validation_accuracy()
            if hvd.rank() == 0:
                print("epoch %d: validation accuracy %.4f on %d ranks" % (state.epoch + 1, state.accuracy,
                                                                          hvd.size()), flush=True)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    def on_reset():  # keep the learning rate proportional to the number of ranks
        for group in optimizer.param_groups:
            group["lr"] = lr * hvd.size()

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, accuracy=0.0)
    state.register_reset_callbacks([on_reset])
    loop(state)
    return state.accuracy, hvd.size()


builder = SparkSession.builder.master(args.master).appName("tfring-spark-elastic-digits")
if args.master.startswith("local"):  # stay on loopback; the workers use this Python
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")

results = tfring.spark.run_elastic(train, args=(args.epochs, args.batch_size, args.lr, args.batches_per_commit),
                                   num_proc=args.num_proc, min_num_proc=args.min_num_proc,
                                   max_num_proc=args.max_num_proc, env={"OMP_NUM_THREADS": "1"})
accuracy, size = results[0]  # one (accuracy, size) per final rank, in rank order
print("validation accuracy %.4f on %d ranks" % (accuracy, size))
spark.stop()
if args.target_accuracy is not None and accuracy < args.target_accuracy:
    raise SystemExit("validation accuracy %.4f below target %.4f" % (accuracy, args.target_accuracy))
