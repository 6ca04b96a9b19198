"""Data-parallel PyTorch training on scikit-learn's bundled 8x8 digits (1,797 images, shipped inside the
scikit-learn wheel: no download). The usual Horovod recipe; only the import line differs.

    tfringrun -np 2 python examples/torch_digits.py
"""
import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import tfring.torch as hvd  # was: import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=15)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="single-rank learning rate (scaled by size)")
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if validation accuracy is lower")
args = parser.parse_args()

hvd.init()
# Pin one GPU per process by local rank; on CPU, one intra-op thread per rank avoids oversubscription.
device = torch.device("cpu")
if torch.cuda.is_available():
    torch.cuda.set_device(hvd.local_rank())
    device = torch.device("cuda", hvd.local_rank())
torch.set_num_threads(1)
torch.manual_seed(1234)

digits = load_digits()
split = train_test_split(digits.images / 16.0, digits.target, test_size=0.2, random_state=0, stratify=digits.target)
x_train, x_val = (torch.tensor(a, dtype=torch.float32).unsqueeze(1) for a in split[:2])
y_train, y_val = (torch.tensor(a, dtype=torch.int64) for a in split[2:])
train_set = TensorDataset(x_train, y_train)
# Each rank trains on its own shard (padded to equal sizes, so every rank runs as many steps).
sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=0)
train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 32, 3), torch.nn.ReLU(),
    torch.nn.Flatten(),
    torch.nn.Linear(32 * 6 * 6, 64), torch.nn.ReLU(),
    torch.nn.Linear(64, 10),
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
# Every rank starts from rank 0's weights and optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)


def validation_accuracy():
    """Each rank scores its share of the validation set; the sums over ranks give the exact accuracy."""
    model.eval()
    with torch.no_grad():
        xs, ys = x_val[hvd.rank()::hvd.size()].to(device), y_val[hvd.rank()::hvd.size()].to(device)
        counts = torch.tensor([(model(xs).argmax(1) == ys).sum().item(), len(ys)], dtype=torch.float64)
    correct, total = hvd.allreduce(counts, op=hvd.Sum, name="val_counts").tolist()
    return correct / total


for epoch in range(args.epochs):
    model.train()
    sampler.set_epoch(epoch)
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb.to(device)), yb.to(device))
        loss.backward()
        optimizer.step()
    loss = hvd.allreduce(loss.detach().cpu(), name="train_loss")  # averaged over ranks
    acc = validation_accuracy()
    if hvd.rank() == 0:
        print("epoch %d: loss %.4f, validation accuracy %.4f" % (epoch + 1, loss.item(), acc))

if hvd.rank() == 0:
    print("validation accuracy %.4f on %d ranks" % (acc, hvd.size()))
if args.target_accuracy is not None and acc < args.target_accuracy:
    raise SystemExit("validation accuracy %.4f below target %.4f" % (acc, args.target_accuracy))
