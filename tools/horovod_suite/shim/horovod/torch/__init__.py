"""horovod.torch -> tfring.torch."""
from horovod._alias import forward

forward(globals(), "tfring.torch")
