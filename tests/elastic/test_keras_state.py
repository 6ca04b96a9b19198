"""KerasState's commit/restore on one rank, in process: a rollback returns the model's weights AND the optimizer's
variables (Adam's moments and iteration count) to the last commit, and training after it continues exactly as it
did from the commit (the kill tests commit every batch, so there a rollback restores what is already there)."""
import keras
import numpy as np

import tfring.keras as hvd


def _values(variables):
    return [np.array(v.numpy(), copy=True) for v in variables]


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_restore_rolls_back_weights_and_optimizer_state():
    hvd.init()
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    x = np.random.RandomState(0).rand(16, 4).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)  # the optimizer has moments and iterations
    state = hvd.elastic.KerasState(model, epoch=0)
    state.epoch = 1
    state.commit()
    weights, slots = _values(model.variables), _values(model.optimizer.variables)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    after_weights, after_slots = _values(model.variables), _values(model.optimizer.variables)
    assert not _same(after_slots, slots) and not _same(after_weights, weights)  # training changed both
    state.epoch = 5
    state.restore()
    assert _same(_values(model.variables), weights)
    assert _same(_values(model.optimizer.variables), slots)  # moments and iterations too
    assert state.epoch == 1
    # From the commit, the same steps give the same result: nothing of the rolled-back epoch is left.
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert _same(_values(model.variables), after_weights) and _same(_values(model.optimizer.variables), after_slots)
