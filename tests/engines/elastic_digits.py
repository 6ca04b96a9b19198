"""The elastic job of tests/engines/test_{spark,ray}_elastic.py: a small MLP on scikit-learn's digits with
tfring.torch's elastic state and sampler. Every rank logs each step (time, step, size) to log_dir; the rank named
by `kill` SIGKILLs its own slot's process (the Spark task's Python worker, the Ray actor) once, at that step, as
a lost executor; the rank's watchdog then kills the rank and the survivors go on from the last commit."""
import hashlib
import json
import os
import signal
import time


def train(log_dir, epochs=4, kill=None, batches_per_commit=4, step_sleep=0.05, min_final_size=None):
    """kill: (rank, step) or None. Returns (rank, size, weights digest, validation accuracy, steps trained);
    with min_final_size, keeps training (up to 8 more epochs) until it trained a step with that many ranks again
    (not only until it has them: a growth at the last commit would end the job without a step at that size)."""
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    import tfring.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    digits = load_digits()
    xs, xv, ys, yv = train_test_split(digits.data / 16.0, digits.target, test_size=0.2, random_state=0,
                                      stratify=digits.target)
    x_train, x_val = torch.tensor(xs, dtype=torch.float32), torch.tensor(xv, dtype=torch.float32)
    y_train, y_val = torch.tensor(ys), torch.tensor(yv)
    dataset = torch.utils.data.TensorDataset(x_train, y_train)
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, sampler=sampler)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.003 * hvd.size()),
                                         named_parameters=model.named_parameters())
    mark = os.path.join(log_dir, "killed")
    me = os.path.join(log_dir, "slot%s.log" % os.environ.get("TFRING_SLOT_INDEX", "x"))

    def on_reset():
        for group in optimizer.param_groups:
            group["lr"] = 0.003 * hvd.size()

    @hvd.elastic.run
    def loop(state):
        def short():  # no step trained at the final size yet
            return min_final_size and state.trained_size < min_final_size and state.epoch < epochs + 8
        while state.epoch < epochs or short():
            model.train()
            for i, (xb, yb) in enumerate(loader):
                if kill and hvd.rank() == kill[0] and state.steps == kill[1] and not os.path.exists(mark):
                    with open(mark, "w") as f:
                        json.dump({"time": time.time(), "size": hvd.size()}, f)
                    mine = int(os.environ["TFRING_SLOT_INDEX"])  # its slot: [index, pid, start time] by host
                    hosts = json.loads(os.environ["TFRING_SLOT_ASSIGN"]).values()
                    os.kill(next(e[1] for h in hosts for e in h["slots"] if e[0] == mine), signal.SIGKILL)
                    time.sleep(30)  # the watchdog kills this rank within a second
                optimizer.zero_grad()
                F.cross_entropy(model(xb), yb).backward()
                optimizer.step()
                state.steps, state.trained_size = state.steps + 1, hvd.size()
                with open(me, "a") as f:
                    f.write("%.4f %d %d\n" % (time.time(), state.steps, hvd.size()))
                state.sampler.record_batch(i, 16)
                if (i + 1) % batches_per_commit == 0:
                    state.commit()
                time.sleep(step_sleep)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, steps=0, trained_size=0)
    state.register_reset_callbacks([on_reset])
    loop(state)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_val).argmax(1) == y_val).float().mean().item()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    return hvd.rank(), hvd.size(), digest, accuracy, state.steps


def recovery(log_dir):
    """From the logs: (seconds from the kill to the next step any survivor finished, sizes seen in order)."""
    with open(os.path.join(log_dir, "killed")) as f:
        killed = json.load(f)
    rows = []
    for name in os.listdir(log_dir):
        if name.endswith(".log"):
            with open(os.path.join(log_dir, name)) as f:
                rows += [tuple(float(v) for v in line.split()) for line in f if line.strip()]
    rows.sort()
    after = [t for t, _, size in rows if t > killed["time"] and size < killed["size"]]
    sizes = []
    for _, _, size in rows:
        if not sizes or sizes[-1] != int(size):
            sizes.append(int(size))
    return (after[0] - killed["time"]) if after else None, sizes
