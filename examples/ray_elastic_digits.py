"""Elastic PyTorch on Ray actors: tfring.ray.ElasticRayExecutor trains on scikit-learn's digits (no download) with
Horovod's elastic recipe (TorchState + ElasticSampler) and Horovod's horovod.ray API with the imports changed.
One actor per slot the discovery offers (each alive node's CPUs / --cpus-per-slot); an actor that dies shrinks
the job (the survivors roll back to the last commit) and its replacement joins at the next commit. Rank 0 sends
each epoch's metrics to the driver with ray_logger.log, where the callback prints them.

    python examples/ray_elastic_digits.py                  # a local Ray cluster of 3 CPUs on 127.0.0.1
    python examples/ray_elastic_digits.py --address auto --min-num-proc 2 --max-num-proc 8
"""
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--address", default=None, help="a running Ray cluster (default: start a local one)")
parser.add_argument("--num-cpus", type=int, default=3, help="CPUs of the local cluster (one slot each)")
parser.add_argument("--min-num-proc", type=int, default=1)
parser.add_argument("--max-num-proc", type=int, default=3)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="single-rank learning rate (scaled by size)")
parser.add_argument("--batches-per-commit", type=int, default=5, help="work lost at most when an actor dies")
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if validation accuracy is lower")
args = parser.parse_args()
if args.address is None:  # stay on loopback (read when Ray is imported) and send no usage statistics
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402

from tfring.ray import ElasticRayExecutor  # noqa: E402  (was: from horovod.ray import ElasticRayExecutor)


def train():
    """Runs in every rank (an MPI process on a slot's actor); cloudpickled, so it imports what it needs."""
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    import tfring.torch as hvd  # was: import horovod.torch as hvd
    from tfring.ray import ray_logger  # was: from horovod.ray import ray_logger

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
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size()),
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
        while state.epoch < args.epochs:
            model.train()
            loss = torch.tensor(float("nan"))  # no batch left when a reset came after the epoch's last commit
            for i, (xb, yb) in enumerate(loader):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(xb), yb)
                loss.backward()
                optimizer.step()
                state.sampler.record_batch(i, args.batch_size)
                if (i + 1) % args.batches_per_commit == 0:
                    state.commit()  # also where new actors' ranks join
            state.accuracy = validation_accuracy()
            if hvd.rank() == 0:  # to the driver's callbacks
                ray_logger.log({"epoch": state.epoch + 1, "loss": loss.item(), "accuracy": state.accuracy,
                                "size": hvd.size()})
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    def on_reset():  # keep the learning rate proportional to the number of ranks
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, accuracy=0.0)
    state.register_reset_callbacks([on_reset])
    loop(state)
    return state.accuracy, hvd.size()


def print_info(info):
    print("epoch %(epoch)d: loss %(loss).4f, validation accuracy %(accuracy).4f on %(size)d ranks" % info, flush=True)


if args.address is None:
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1")
else:
    ray.init(address=args.address)
settings = ElasticRayExecutor.create_settings(min_num_proc=args.min_num_proc, max_num_proc=args.max_num_proc,
                                              elastic_timeout=120, timeout_s=120)
executor = ElasticRayExecutor(settings, cpus_per_slot=1, env_vars={"OMP_NUM_THREADS": "1"})
executor.start()
results = executor.run(train, callbacks=[print_info])
accuracy, size = results[0]  # one (accuracy, size) per final rank, in rank order
print("validation accuracy %.4f on %d ranks" % (accuracy, size))
ray.shutdown()
if args.target_accuracy is not None and accuracy < args.target_accuracy:
    raise SystemExit("validation accuracy %.4f below target %.4f" % (accuracy, args.target_accuracy))
