"""The Keras optimizer wrappers on TensorFlow's ops (Keras 3 and tf_keras); `tfring.keras` and
`tfring.tensorflow.DistributedOptimizer` hand Keras optimizers to them."""
