"""What every Keras optimizer wrapper (Keras 3 on any backend, tf_keras) hands to the optimizer it wraps; plain
Python, no framework."""


class InnerOptimizerDelegation:
    """learning_rate and iterations live in the inner optimizer, so schedules, callbacks and checkpoints that
    read or set them on the wrapper reach the one doing the update. Mixed in before the Keras base class."""

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self.inner_optimizer.learning_rate = value

    @property
    def iterations(self):
        return self.inner_optimizer.iterations
