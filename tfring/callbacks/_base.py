"""The Callback base class of the Keras in use: tf_keras when TF_USE_LEGACY_KERAS=1, else Keras 3."""
import os

if os.environ.get("TF_USE_LEGACY_KERAS", "0").lower() in ("1", "true"):
    from tf_keras.callbacks import Callback  # noqa: F401
else:
    from keras.callbacks import Callback  # noqa: F401


def optimizer_built(opt):
    """Keras 3 optimizers say so; tf_keras ones have variables once built (in their first apply)."""
    built = getattr(opt, "built", None)
    return bool(built) if built is not None else len(opt.variables) > 1
