"""horovod.tensorflow -> tfring. The submodules util and mpi_ops are attributes, as in Horovod
(its tests call hvd.util._executing_eagerly, hvd._executing_eagerly and hvd.mpi_ops._basics...)."""
from horovod._alias import forward
from horovod.tensorflow import mpi_ops, util  # noqa: F401
from horovod.tensorflow.util import _executing_eagerly  # noqa: F401

forward(globals(), "tfring")
