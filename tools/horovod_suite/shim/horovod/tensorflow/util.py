"""horovod.tensorflow.util: the test-scaffolding helper the tests import; everything else -> tfring."""
import tensorflow as tf

from horovod._alias import forward

_executing_eagerly = tf.executing_eagerly

forward(globals(), "tfring")
