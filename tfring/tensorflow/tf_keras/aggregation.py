"""backward_passes_per_step for the tf_keras DistributedOptimizer, with Horovod's semantics: k local gradients are
summed per variable; on every k-th pass the sums are reduced over the ranks (and divided by k with
average_aggregated_gradients) and applied; on the other passes only the optimizer's iterations advance."""
import tensorflow as tf

from tfring.tensorflow.tape import var_key


def check_passes(who, backward_passes_per_step):
    k = backward_passes_per_step
    if type(k) is not int or k < 1:
        raise ValueError("%s: backward_passes_per_step=%r must be an int >= 1" % (who, k))
    return k


class GradientAggregator:
    """Horovod's `_agg_helper`: `counter` (a tf.Variable) is the number of passes accumulated since the last
    communication, so it reads `steps % backward_passes_per_step` after `steps` passes."""

    def __init__(self, who, backward_passes_per_step, average_aggregated_gradients):
        self.backward_passes_per_step = check_passes(who, backward_passes_per_step)
        self.average_aggregated_gradients = bool(average_aggregated_gradients)
        with tf.init_scope():
            self.counter = tf.Variable(0, trainable=False, dtype=tf.int32, name="tfring_aggregation_counter")
        self._sums = {}  # var_key -> (variable, its gradient sum)

    def _sum_of(self, var, grad):
        key = var_key(var)
        if key not in self._sums:
            with tf.init_scope():  # created once, outside any tf.function or tf.cond being traced
                self._sums[key] = (var, tf.Variable(tf.zeros(var.shape, grad.dtype), trainable=False,
                                                    name="tfring_grad_sum"))
        return self._sums[key][1]

    def accumulate(self, grads, variables, reduce):
        """Adds grads to the sums and counts the pass. On the k-th pass returns reduce(sums) (divided by k with
        average_aggregated_gradients) and zeroes the sums and the counter, so an inf or nan gradient is gone
        from the next cycle; on the other passes returns the running local sums. Sparse gradients are summed
        dense. None stays None."""
        present = [i for i, g in enumerate(grads) if g is not None]
        sums = []
        for i in present:
            g = tf.convert_to_tensor(grads[i])  # IndexedSlices -> dense
            acc = self._sum_of(variables[i], g)
            acc.assign_add(g)
            sums.append(acc)
        self.counter.assign_add(1)
        k = self.backward_passes_per_step

        def communicate():
            values = [a.read_value() for a in sums]
            if self.average_aggregated_gradients:
                values = [v / tf.cast(k, v.dtype) for v in values]
            reduced = reduce(values, [variables[i] for i in present])
            with tf.control_dependencies([tf.convert_to_tensor(r) for r in reduced]):
                for a in sums:
                    a.assign(tf.zeros_like(a))
                self.counter.assign(0)
            return [tf.identity(r) for r in reduced]

        def keep():
            return [a.read_value() for a in sums]

        result = tf.cond(tf.equal(self.counter, k), communicate, keep) if present else []
        out = list(grads)
        for i, r in zip(present, result):
            out[i] = r
        return out

    def apply_or_count(self, apply_fn, iterations):
        """Runs apply_fn() right after a communicating pass (counter back at 0); otherwise only adds 1 to
        iterations (as Horovod does, so iterations counts every pass)."""
        def apply():
            apply_fn()
            return tf.constant(True)

        def count():
            iterations.assign_add(1)
            return tf.constant(False)
        return tf.cond(tf.equal(self.counter, 0), apply, count)
