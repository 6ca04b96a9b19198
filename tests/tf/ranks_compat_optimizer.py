"""tfring.DistributedOptimizer (Horovod's horovod.tensorflow.DistributedOptimizer) wrapping a
tf.compat.v1.train.Optimizer in graph mode (tf.compat.v1.Session): minimize() with reduced gradients, sparse
gradients, local variables and process sets (np=3: {0, 1} and {2}; np=2: {0} and {1}), values checked on every
rank against a numpy simulation of every rank."""
import keras
import numpy as np
import pytest
import tensorflow as tf
from mpi4py import MPI

import tfring
import tfring.keras
from rank_helpers import restarted

R, N = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
FIRST = [0, 1] if N > 2 else [0]
REST = list(range(len(FIRST), N))
first_set, rest_set = tfring.ProcessSet(FIRST), tfring.ProcessSet(REST)
MINE = first_set if R in FIRST else rest_set
LR, STEPS = 0.1, 2


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with restarted(process_sets=[first_set, rest_set]):
        yield


def simulate(op, scale):
    """Every rank's w (global), table (sparse gradient) and b (local) after STEPS steps of plain SGD."""
    w = [np.array([1.0, 2.0]) for _ in range(N)]
    table, b = np.ones((3, 2)), [np.array([1.0]) for _ in range(N)]
    for _ in range(STEPS):
        grads = [(r + 1) * w[r] for r in range(N)]
        reduced = np.sum(grads, axis=0) / (N if op == "average" else 1)
        table_grad = np.zeros((3, 2))
        for r in range(N):
            table_grad[r % 3] += (r + 1) / (N if op == "average" else 1)
        table -= LR * table_grad
        for r in range(N):
            w[r] = w[r] - LR * reduced
            b[r] = b[r] - LR * (r + 1) * b[r] / (N if scale else 1)
    return w[R], table, b[R]


@pytest.mark.parametrize("op", ["average", "sum"])
@pytest.mark.parametrize("sparse_as_dense", [False, True])
@pytest.mark.parametrize("scale", [True, False])
def test_minimize_reduces_the_gradients_in_graph_mode(op, sparse_as_dense, scale):
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=[1.0, 2.0])
        table = tf.compat.v1.get_variable("table", initializer=np.ones((3, 2), np.float32))
        b = tf.compat.v1.get_variable("b", initializer=[1.0], use_resource=False)
        squares = (tf.reduce_sum(w * w) + tf.reduce_sum(b * b)) / 2
        loss = (R + 1) * (squares + tf.reduce_sum(tf.gather(table, [R % 3])))
        opt = tfring.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                          op=tfring.Average if op == "average" else tfring.Sum,
                                          sparse_as_dense=sparse_as_dense, scale_local_gradients=scale)
        opt.register_local_var(b)
        grads_and_vars = opt.compute_gradients(loss)
        table_grad = [g for g, v in grads_and_vars if v is table][0]
        assert isinstance(table_grad, tf.Tensor if sparse_as_dense else tf.IndexedSlices)
        train = opt.minimize(loss)
        types = {o.type for o in graph.get_operations()}
        assert {"HorovodAllreduce", "HorovodGroupedAllreduce"} & types, types
        assert sparse_as_dense or "HorovodAllgather" in types, types  # IndexedSlices are allgathered
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(STEPS):
                sess.run(train)
            got = sess.run([w, table, b])
    for g, want in zip(got, simulate(op, scale)):
        np.testing.assert_allclose(g, want, rtol=1e-5)


class ConstantOptimizer(tf.compat.v1.train.Optimizer):
    """Horovod's process-set test optimizer: the gradient is the rank, the update adds it."""

    def __init__(self):
        super().__init__(name="constant", use_locking=False)
        self.variable = tf.compat.v1.get_variable("dummy_var", initializer=[0.0], use_resource=False)

    def compute_gradients(self, *args, **kwargs):
        return [(tf.constant([float(R)]), self.variable)]

    def _apply_dense(self, grad, var):
        return var.assign_add(grad)


@pytest.mark.parametrize("which", ["first", "mine"])
def test_process_set_members_average_the_others_keep_their_gradient(which):
    ps = first_set if which == "first" else MINE
    with tf.Graph().as_default() as graph:
        opt = tfring.DistributedOptimizer(ConstantOptimizer(), average_aggregated_gradients=True, process_set=ps)
        update = opt.apply_gradients(opt.compute_gradients())
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(update)
            got = sess.run(opt._optimizer.variable.read_value())[0]
    members = ps.ranks
    want = np.mean(members) if R in members and len(members) > 1 else float(R)
    assert got == pytest.approx(want)


def test_keras_optimizers_and_bad_arguments():
    opt = tfring.DistributedOptimizer(keras.optimizers.SGD(0.1), op=tfring.Sum, backward_passes_per_step=2)
    assert isinstance(opt, tfring.keras.DistributedOptimizer) and opt.backward_passes_per_step == 2
    with pytest.raises(TypeError, match="optimizer must be a tf.compat.v1.train.Optimizer or a Keras"):
        tfring.DistributedOptimizer("sgd")
    with tf.Graph().as_default():
        with pytest.raises(NotImplementedError, match="backward_passes_per_step=2"):
            tfring.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), backward_passes_per_step=2)
        with pytest.raises(ValueError, match="gradient_predivide_factor=2.0"):
            tfring.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), op=tfring.Sum,
                                        gradient_predivide_factor=2.0)
