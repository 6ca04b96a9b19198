"""TensorFlow and Keras states (Horovod's `TensorFlowState`, `TensorFlowKerasState`): variables kept as host
copies at each commit, assigned back on a rollback, broadcast from rank 0 on `sync()`."""
from tfring.common.elastic import state as _state
from tfring.common.elastic.variables_state import VariablesState
from tfring.tensorflow.functions import broadcast_object, broadcast_variables


State, ObjectState = _state.binding_states("tfring.tensorflow", broadcast_object, __name__)


class TensorFlowState(VariablesState):
    """A list of `tf.Variable`s (plus `ObjectState` attributes) committed, rolled back and synced together.

    Args:
        variables: the variables (default: none; TF1 collections are not supported).
        session: accepted for Horovod compatibility; must be None (TF2 eager).
        **kwargs: plain attributes, as `ObjectState`.

    Raises:
        ValueError: a session was given.
    """

    _default_bcast_object = staticmethod(ObjectState._default_bcast_object)

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise ValueError("tfring.tensorflow.elastic.TensorFlowState: session=%r: TF1 sessions are not supported; "
                             "pass variables in TF2 eager mode" % (session,))
        super().__init__(variables=variables, **kwargs)

    def _broadcast(self, variables):
        broadcast_variables(variables, root_rank=0)


class TensorFlowKerasState(TensorFlowState):
    """A Keras model and its optimizer (Keras 3 or tf_keras), plus `ObjectState` attributes. The Keras layer's
    `tfring.keras.elastic.KerasState` is this state on the TensorFlow backend.

    Args:
        model: the Keras model.
        optimizer: its optimizer (default: `model.optimizer`).
        backend: accepted for Horovod compatibility (unused).
        **kwargs: plain attributes, as `ObjectState`.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        VariablesState.__init__(self, model=model, optimizer=optimizer, **kwargs)
