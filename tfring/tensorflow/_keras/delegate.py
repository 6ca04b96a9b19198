"""What both optimizer wrappers (Keras 3 and tf_keras) hand to the optimizer they wrap."""


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
