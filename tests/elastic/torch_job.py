"""An elastic PyTorch job for tests/elastic/test_torch_elastic.py: a small regression model (Adam in
DistributedOptimizer)
on 96 rows, an ElasticSampler (batches of 4) and a TorchState holding model, optimizer, sampler and a step
counter; a commit every ELASTIC_COMMIT_EVERY steps and at each epoch end. ELASTIC_KILL="rank:step" makes that
(original) rank SIGKILL itself right after finishing that step (after its commit, if it is a commit point), or
send itself ELASTIC_SIGNAL instead (STOP: it freezes, alive and silent);
ELASTIC_SHARDED=1 shards Adam's state (ZeRO stage 1: each rank keeps its parameters' part);
ELASTIC_GROW="path=text" makes rank 0 rewrite the discovery file after step 2 (ELASTIC_STEP_SLEEP slows steps).
Every rank writes to $ELASTIC_OUT: init.pt (rank 0, the initial parameters and the data), log.<pid>.jsonl (one
line per commit with the [epoch, dataset index] pairs this rank processed since the previous commit, one per
restore, one per reset) and final.<pid>.pt (final parameters, Adam state, step counter, size). With
ELASTIC_SCRAPE=<token file> (and tfringrun --metrics-port), the final rank 0 scrapes its Prometheus endpoint and writes
the elastic series it read to scrape.json."""
import json
import os
import signal
import sys
import time

import torch
from mpi4py import MPI
from torch.utils.data import DataLoader, TensorDataset

import tfring.torch as hvd

EPOCHS, ROWS, BATCH = 2, 96, 4
OUT = os.environ["ELASTIC_OUT"]
KILL = os.environ.get("ELASTIC_KILL", "")
SIGNAL = getattr(signal, "SIG" + os.environ.get("ELASTIC_SIGNAL", "KILL"))
COMMIT_EVERY = int(os.environ.get("ELASTIC_COMMIT_EVERY", "3"))
GROW = os.environ.get("ELASTIC_GROW", "")
SLEEP = float(os.environ.get("ELASTIC_STEP_SLEEP", "0"))

torch.set_num_threads(1)
# Started by the running job when it grew. Asked before init(): the newcomer disconnects from its parents there.
SPAWNED = MPI.Comm.Get_parent() != MPI.COMM_NULL
hvd.init()
FIRST_RANK = hvd.rank()
generator = torch.Generator().manual_seed(0)
x_all = torch.randn(ROWS, 8, generator=generator)
y_all = x_all @ torch.randn(8, 1, generator=generator) + 0.1 * torch.randn(ROWS, 1, generator=generator)
dataset = TensorDataset(x_all, y_all)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters(),
                                     sharded=int(os.environ.get("ELASTIC_SHARDED", "0")))
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
log = open(os.path.join(OUT, "log.%d.jsonl" % os.getpid()), "a")
pending = []  # [epoch, index] this rank processed since the last commit (lost with a rollback)
if FIRST_RANK == 0 and not SPAWNED:
    torch.save({"params": model.state_dict(), "x": x_all, "y": y_all}, os.path.join(OUT, "init.pt"))


def write(**row):
    log.write(json.dumps(dict(row, t=time.time(), rank=hvd.rank(), size=hvd.size(), first_rank=FIRST_RANK,
                              spawned=SPAWNED)) + "\n")
    log.flush()


def adam_steps():  # this rank's own entries (no collective: a restore runs while the job is broken)
    return sorted({int(s["step"]) for s in optimizer.state.values()})


def owned():  # the positions of the parameters whose state this rank keeps
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return [i for i, p in enumerate(params) if p in optimizer.state]


def grads():  # the positions of the parameters whose gradient this rank holds
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return [i for i, p in enumerate(params) if p.grad is not None]


class LoggedTorchState(hvd.elastic.TorchState):
    """Logs each commit (with the indices it makes permanent) and each rollback."""

    def save(self):
        super().save()
        write(event="commit", step=self.step, epoch=self.epoch, indices=pending,
              committed=sorted(self._handlers["sampler"].saved["processed_indices"]), adam=adam_steps(),
              owned=owned(), grads=grads())
        pending.clear()

    def restore(self):
        super().restore()
        pending.clear()
        saved = self._handlers["model"].saved
        write(event="restore", step=self.step, epoch=self.epoch, adam=adam_steps(),
              equal_to_commit=all(torch.equal(v, saved[k]) for k, v in model.state_dict().items()))


state = LoggedTorchState(model, optimizer, sampler=sampler, epoch=0, step=0)
state.register_reset_callbacks([lambda: write(event="reset", step=state.step)])


@hvd.elastic.run
def train(state):
    while state.epoch < EPOCHS:
        for batch_idx, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            state.sampler.record_batch(batch_idx, BATCH)
            pending.extend([state.epoch, i] for i in state.sampler.get_indices(batch_idx, BATCH))
            state.step += 1
            time.sleep(SLEEP)
            if GROW and FIRST_RANK == 0 and not SPAWNED and state.step == 2:  # "more slots" appear mid-epoch
                path, content = GROW.split("=", 1)
                with open(path, "w") as f:
                    f.write(content + "\n")
            if state.step % COMMIT_EVERY == 0:
                state.commit()
            if KILL and not SPAWNED and [FIRST_RANK, state.step] == [int(v) for v in KILL.split(":")]:
                with open(os.path.join(OUT, "killed.json"), "w") as f:
                    json.dump({"t": time.time(), "step": state.step}, f)
                os.kill(os.getpid(), SIGNAL)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


train(state)
if os.environ.get("ELASTIC_SCRAPE") and hvd.rank() == 0:
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    from tfring.common import metrics_endpoint
    with open(os.environ["ELASTIC_SCRAPE"]) as f:
        request = urllib.request.Request("http://%s/metrics" % metrics_endpoint.address(),
                                         headers={"Authorization": "Bearer " + f.read().strip()})
    with urllib.request.urlopen(request, timeout=30) as reply:
        text = reply.read().decode()
    with open(os.path.join(OUT, "scrape.json"), "w") as f:
        json.dump({s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                   if s.name.startswith("tfring_elastic_") or s.name == "tfring_size"}, f)
torch.save({"params": model.state_dict(), "adam": optimizer.state_dict()["state"], "step": state.step,
            "epoch": state.epoch, "rank": hvd.rank(), "size": hvd.size(), "tensorflow": "tensorflow" in sys.modules},
           os.path.join(OUT, "final.%d.pt" % os.getpid()))
print("rank %d of %d done: step %d" % (hvd.rank(), hvd.size(), state.step))
sys.stdout.flush()
