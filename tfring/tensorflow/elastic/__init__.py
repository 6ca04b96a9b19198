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
from tfring.common.elastic.run import run
from tfring.common.errors import HorovodInternalError, HostsUpdatedInterrupt, WorkersFailedError
from tfring.tensorflow.elastic.state import ObjectState, State, TensorFlowKerasState, TensorFlowState

KerasState = TensorFlowKerasState
