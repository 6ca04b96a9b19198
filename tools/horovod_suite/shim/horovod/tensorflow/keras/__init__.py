"""horovod.tensorflow.keras -> tfring.keras."""
from horovod._alias import forward

forward(globals(), "tfring.keras")
