"""horovod.mxnet -> tfring.mxnet."""
from horovod._alias import forward

forward(globals(), "tfring.mxnet")
