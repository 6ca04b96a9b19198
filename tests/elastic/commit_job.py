"""A job for tests/elastic/test_durable_commits.py: full-batch SGD on a small regression model (tfring.torch,
TorchState with a step counter), a commit after every step, STEPS steps in all. The global batch of each step is
the same at any size (rows rank::size of 12), so the weights equal one process's on the whole batch, whatever the
size and however often the job was started again. Every rank appends one JSON line per finished step to
$COMMIT_OUT/steps.<pid>.jsonl; at the end it writes final.<pid>.pt."""
import json
import os
import sys
import time

import torch

import tfring.torch as hvd

STEPS, ROWS, LR = 40, 12, 0.05
OUT = os.environ["COMMIT_OUT"]
SLEEP = float(os.environ.get("COMMIT_STEP_SLEEP", "0"))

torch.set_num_threads(1)
hvd.init()
generator = torch.Generator().manual_seed(0)
x_all = torch.randn(ROWS, 8, generator=generator)
y_all = x_all @ torch.randn(8, 1, generator=generator)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, step=0)
log = open(os.path.join(OUT, "steps.%d.jsonl" % os.getpid()), "a")


@hvd.elastic.run
def train(state):
    x, y = x_all[hvd.rank()::hvd.size()], y_all[hvd.rank()::hvd.size()]
    while state.step < STEPS:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        state.step += 1
        state.commit()
        log.write(json.dumps({"t": time.time(), "step": state.step, "rank": hvd.rank(), "size": hvd.size()}) + "\n")
        log.flush()
        time.sleep(SLEEP)


train(state)
torch.save({"params": model.state_dict(), "step": state.step, "rank": hvd.rank(), "size": hvd.size()},
           os.path.join(OUT, "final.%d.pt" % os.getpid()))
print("rank %d of %d done: step %d" % (hvd.rank(), hvd.size(), state.step))
sys.stdout.flush()
