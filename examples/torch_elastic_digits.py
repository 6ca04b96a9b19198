"""Elastic PyTorch training on scikit-learn's bundled 8x8 digits (no download): Horovod's elastic recipe with
only the import line changed. Workers may die (the rest roll back to the last commit and go on) or be added by a
host discovery script (they receive the committed state); an ElasticSampler re-shards the rest of the epoch.

    tfringrun -np 3 --min-np 2 python examples/torch_elastic_digits.py
    tfringrun -np 2 --min-np 1 --max-np 4 --host-discovery-script ./discover.sh python examples/torch_elastic_digits.py
"""
import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

import tfring.torch as hvd  # was: import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="single-rank learning rate (scaled by size)")
parser.add_argument("--batches-per-commit", type=int, default=10, help="work lost at most when a worker fails")
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if validation accuracy is lower")
args = parser.parse_args()

hvd.init()
torch.set_num_threads(1)  # one intra-op thread per rank avoids oversubscribing the CPU
torch.manual_seed(1234)

digits = load_digits()
split = train_test_split(digits.images / 16.0, digits.target, test_size=0.2, random_state=0, stratify=digits.target)
x_train, x_val = (torch.tensor(a, dtype=torch.float32).unsqueeze(1) for a in split[:2])
y_train, y_val = (torch.tensor(a, dtype=torch.int64) for a in split[2:])
train_set = TensorDataset(x_train, y_train)
# Shards over the current ranks and, after a reset, re-shards only what was not processed at the last commit.
sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True, seed=0)
train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 32, 3), torch.nn.ReLU(),
    torch.nn.Flatten(),
    torch.nn.Linear(32 * 6 * 6, 64), torch.nn.ReLU(),
    torch.nn.Linear(64, 10),
)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())


def validation_accuracy():
    """Each rank scores its share of the validation set; the sums over ranks give the exact accuracy."""
    model.eval()
    with torch.no_grad():
        xs, ys = x_val[hvd.rank()::hvd.size()], y_val[hvd.rank()::hvd.size()]
        counts = torch.tensor([(model(xs).argmax(1) == ys).sum().item(), len(ys)], dtype=torch.float64)
    correct, total = hvd.allreduce(counts, op=hvd.Sum, name="val_counts").tolist()
    return correct / total


@hvd.elastic.run
def train(state):
    # Called again after every reset, from the last commit (epoch, model, optimizer and sampler all rolled back).
    while state.epoch < args.epochs:
        model.train()
        loss = torch.tensor(float("nan"))  # no batch left when a reset came after the epoch's last commit
        for batch_idx, (xb, yb) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            state.sampler.record_batch(batch_idx, args.batch_size)
            if (batch_idx + 1) % args.batches_per_commit == 0:
                state.commit()  # also where ranks added by the discovery script join
        state.accuracy = validation_accuracy()
        if hvd.rank() == 0:
            print("epoch %d: loss %.4f, validation accuracy %.4f on %d ranks"
                  % (state.epoch + 1, loss.item(), state.accuracy, hvd.size()), flush=True)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)  # at the end of an epoch: forgets the processed indices
        state.commit()


def on_reset():
    # Keep the learning rate proportional to the number of ranks (sync then sends rank 0's to newcomers).
    for group in optimizer.param_groups:
        group["lr"] = args.lr * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, accuracy=0.0)
state.register_reset_callbacks([on_reset])
train(state)

if hvd.rank() == 0:
    print("validation accuracy %.4f on %d ranks" % (state.accuracy, hvd.size()))
if args.target_accuracy is not None and state.accuracy < args.target_accuracy:
    raise SystemExit("validation accuracy %.4f below target %.4f" % (state.accuracy, args.target_accuracy))
