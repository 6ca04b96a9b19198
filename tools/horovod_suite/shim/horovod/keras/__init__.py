"""horovod.keras -> tfring.keras (under TF2 both of Horovod's Keras bindings drive tf.keras)."""
from horovod._alias import forward

forward(globals(), "tfring.keras")
