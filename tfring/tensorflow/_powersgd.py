"""PowerSGD (tfring/common/powersgd.py) for TensorFlow's DistributedGradientTape: a tape is made anew every step
(Horovod's pattern), so Q, the error and the step count live here, per settings and per source variable, as
tf.Variables made on first use (under tf.init_scope: inside a tf.function too); the warm-up is a tf.cond whose
branches return the new state."""
import tensorflow as tf

from tfring.common import powersgd


class TFLinearAlgebra(powersgd.LinearAlgebra):
    """TensorFlow's matrix products and QR."""

    matmul = staticmethod(tf.matmul)
    matmul_tn = staticmethod(lambda a, b: tf.matmul(a, b, transpose_a=True))
    matmul_nt = staticmethod(lambda a, b: tf.matmul(a, b, transpose_b=True))
    orthonormal = staticmethod(lambda p: tf.linalg.qr(p)[0])  # reduced: n x r


class TapeState:
    """One settings' state across the tapes of a training loop.

    Args:
        config: the `PowerSGD` settings.
    """

    def __init__(self, config):
        self.config = config
        self.qs, self.errors = {}, {}  # variable key -> tf.Variable
        with tf.init_scope():
            self.steps = tf.Variable(0, dtype=tf.int32, trainable=False, name="powersgd_steps")

    def _state_of(self, key, index, grad, nm):
        if key not in self.qs:
            with tf.init_scope():  # made eagerly even when the first call is traced
                self.qs[key] = tf.Variable(tf.constant(self.config.initial_q(nm[1], index), grad.dtype),
                                           trainable=False, name="powersgd_q")
                self.errors[key] = tf.Variable(tf.zeros(nm, grad.dtype), trainable=False, name="powersgd_error")
        return self.qs[key], self.errors[key]

    def reduce(self, grads, keys, allreduce):
        """One step's reduced gradients.

        Args:
            grads: dense gradients.
            keys: a stable key per gradient (its variable's).
            allreduce: grouped allreduce of a list, given the round's name: allreduce(tensors, name).

        Returns:
            list: the reduced gradients, in order.
        """
        shapes = {i: self.config.matrix_shape(g.shape) for i, g in enumerate(grads)}
        compressed = [i for i in range(len(grads)) if shapes[i] is not None]
        plain = [i for i in range(len(grads)) if shapes[i] is None]
        state = [self._state_of(keys[i], i, grads[i], shapes[i]) for i in compressed]
        rounds = iter(("powersgd.P", "powersgd.Q"))

        def compress():
            return powersgd.compress_step(grads, shapes, compressed, plain, [q.read_value() for q, _ in state],
                                          [e.read_value() for _, e in state],
                                          lambda ts: allreduce(ts, next(rounds)) if ts else [], TFLinearAlgebra,
                                          tf.reshape)

        def warm_up():
            reduced = allreduce([grads[i] for i in compressed + plain], "powersgd.warmup")
            return list(reduced), [q.read_value() for q, _ in state], [e.read_value() for _, e in state]

        if self.config.warmup_steps:
            step = self.steps.assign_add(1)
            out, qs, errors = tf.cond(step <= self.config.warmup_steps, warm_up, compress)
        else:
            out, qs, errors = compress()
        for (q_var, e_var), q, e in zip(state, qs, errors):
            q_var.assign(q)
            e_var.assign(e)
        return powersgd.placed(grads, compressed + plain, out)


_STATES = {}


def tape_state(config):
    """The state of these settings (equal settings share one: a loop may build them anew every step).

    Args:
        config: the `PowerSGD` settings.

    Returns:
        TapeState
    """
    if repr(config) not in _STATES:
        _STATES[repr(config)] = TapeState(config)
    return _STATES[repr(config)]
