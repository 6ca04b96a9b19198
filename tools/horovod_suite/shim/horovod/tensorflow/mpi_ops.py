"""horovod.tensorflow.mpi_ops -> tfring.tensorflow.mpi_ops (then tfring). `_basics` (Horovod's HorovodBasics object)
forwards to
tfring.common.basics, tfring.common.process_sets, tfring."""
import types

from horovod._alias import forward

_basics = types.ModuleType("horovod.tensorflow.mpi_ops._basics")
forward(vars(_basics), "tfring.common.basics", "tfring.common.process_sets", "tfring")

forward(globals(), "tfring.tensorflow.mpi_ops", "tfring")
