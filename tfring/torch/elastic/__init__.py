"""Elastic training for PyTorch (Horovod's `horovod.torch.elastic`): the job goes on when workers die and grows
when the launcher finds new hosts, rolling back to the last `state.commit()`. No TensorFlow needed.

    sampler = hvd.elastic.ElasticSampler(dataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)

    @hvd.elastic.run
    def train(state):
        while state.epoch < epochs:
            for batch_idx, (x, y) in enumerate(loader):
                ...  # forward, backward, optimizer.step()
                state.sampler.record_batch(batch_idx, 32)
                if batch_idx % 10 == 9:
                    state.commit()
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    train(state)

Start it with `tfringrun -np N --min-np M [--max-np X] [--host-discovery-script S] python train.py`. The
machinery is `tfring.common.elastic`'s (MPI with ULFM: survivors shrink the communicator; new slots are spawned); see
docs/elastic.md.
"""
from tfring.common.errors import HorovodInternalError, HostsUpdatedInterrupt, WorkersFailedError  # noqa: F401
from tfring.common.elastic.run import run  # noqa: F401
from tfring.torch.elastic.sampler import ElasticSampler  # noqa: F401
from tfring.torch.elastic.state import ObjectState, State, TorchState  # noqa: F401

__all__ = ["ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "State", "TorchState",
           "WorkersFailedError", "run"]
