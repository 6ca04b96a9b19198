"""Run by allreduce_np2.sh under mpirun -np 2: loads the op library at argv[1] (the Bazel-built one, not the
installed tfring package) and checks an allreduce on every rank. Uses only the C API and the raw ops."""
import ctypes
import sys

from mpi4py import MPI  # first: mpi4py finalizes MPI at exit, so mpirun sees a clean exit
import numpy as np
import tensorflow as tf

path = sys.argv[1]
ops = tf.load_op_library(path)
c = ctypes.CDLL(path)
c.tfring_reduce_op.argtypes = [ctypes.c_char_p]
SUM, AVERAGE = c.tfring_reduce_op(b"Sum"), c.tfring_reduce_op(b"Average")  # the values the bindings read too
assert (SUM, AVERAGE) == (1, 0), (SUM, AVERAGE)  # Horovod's numbering
c.tfring_init.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int]
c.tfring_built_tf_version.restype = ctypes.c_char_p

err = ctypes.create_string_buffer(1024)
if c.tfring_init(-1, err, len(err)) != 0:  # -1: MPI_COMM_WORLD
    sys.exit("tfring_init: " + err.value.decode())
rank, size = c.tfring_rank(), c.tfring_size()
assert (rank, size) == (MPI.COMM_WORLD.rank, 2), (rank, size)
assert c.tfring_built_tf_version().decode() == tf.__version__, c.tfring_built_tf_version()

x = tf.constant([1.0, 2.0, 3.0]) * (rank + 1)
total = ops.horovod_allreduce(x, reduce_op=SUM, prescale_factor=1.0, postscale_factor=1.0, tensor_name="sum")
mean = ops.horovod_allreduce(x, reduce_op=AVERAGE, prescale_factor=1.0, postscale_factor=1.0, tensor_name="avg")
np.testing.assert_allclose(total.numpy(), [3.0, 6.0, 9.0])
np.testing.assert_allclose(mean.numpy(), [1.5, 3.0, 4.5])
c.tfring_shutdown()
print("allreduce ok on rank %d" % rank, flush=True)
