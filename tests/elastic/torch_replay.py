"""The reference for tests/elastic/test_torch_elastic.py: what a commit-consistent run of torch_job.py ends with,
replayed in one process (run apart from pytest: torch's optimizer step loads triton).
Usage: torch_replay.py INIT KILL_AT OUT."""
import math
import sys

import torch

from tfring.torch.elastic.sampler import epoch_order, partition

ROWS, BATCH, COMMIT_EVERY = 96, 4, 3  # torch_job.py's


def replay(init, kill_at, victim_size=3, after_size=2):
    """The parameters and Adam state a commit-consistent run ends with: epoch 0 at 3 ranks up to the last commit
    before the kill, the rest of epoch 0 re-sharded over 2 ranks, epoch 1 at 2 ranks; each step averages the
    ranks' gradients, as DistributedOptimizer does."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model.load_state_dict(init["params"])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = init["x"], init["y"]

    def step(batches):
        grads = []
        for rows in batches:
            model.zero_grad()
            torch.nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for p, *g in zip(model.parameters(), *grads):
            p.grad = sum(g) / len(g)
        optimizer.step()

    def run(remaining, n, steps=None):
        shards = [partition(remaining, n, r) for r in range(n)]
        steps = math.ceil(len(shards[0]) / BATCH) if steps is None else steps
        for b in range(steps):
            step([s[b * BATCH:(b + 1) * BATCH] for s in shards])
        return {i for s in shards for i in s[:steps * BATCH]}

    committed = kill_at // COMMIT_EVERY * COMMIT_EVERY
    order = epoch_order(ROWS, True, 3, 0)
    done = run(order, victim_size, committed)
    run([i for i in order if i not in done], after_size)
    run(epoch_order(ROWS, True, 3, 1), after_size)
    return model.state_dict(), optimizer.state_dict()["state"]


if __name__ == "__main__":
    params, adam = replay(torch.load(sys.argv[1]), int(sys.argv[2]))
    torch.save((params, adam), sys.argv[3])
