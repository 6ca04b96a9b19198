"""Elastic training (Horovod's `hvd.elastic`): a job that goes on when workers die and grows when the launcher
finds new hosts, rolling back to the last `state.commit()`.

    @hvd.elastic.run
    def train(state):
        ...  # uses state.model, state.epoch; commits with state.commit() or CommitStateCallback

    train(hvd.elastic.KerasState(model, optimizer, epoch=0, batch=0))

Start it with `tfringrun -np N --min-np M [--max-np X] [--host-discovery-script S] python train.py`.
On MPI: a dead worker makes every survivor's pending collective fail (ULFM revoke); the survivors roll back,
shrink the communicator (no process restarts) and continue; new slots are filled with `MPI_Comm_spawn`.
See docs/elastic.md.
"""
from tfring.elastic.errors import HorovodInternalError, HostsUpdatedInterrupt, WorkersFailedError  # noqa: F401
from tfring.elastic.run import run  # noqa: F401
from tfring.elastic.state import ObjectState, State  # noqa: F401
from tfring.elastic.tf_state import TensorFlowKerasState, TensorFlowState  # noqa: F401

KerasState = TensorFlowKerasState


def __getattr__(name):
    # The Keras callbacks import Keras: only when asked for.
    if name in ("CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback"):
        from tfring.elastic import callbacks
        return getattr(callbacks, name)
    raise AttributeError("module 'tfring.elastic' has no attribute %r" % name)
