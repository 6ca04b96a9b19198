"""The Callback base class of the Keras in use (tf_keras when TF_USE_LEGACY_KERAS=1, else Keras 3), and
print_msg: the callbacks' messages go through that Keras' own messaging, so
`keras.config.disable_interactive_logging()` (tf_keras: `tf_keras.utils.disable_interactive_logging()`) sends
them to absl logging instead of stdout, as it does for Keras' own callbacks."""
import sys

from absl import logging

from tfring.keras._backend import legacy_keras

if legacy_keras():
    from tf_keras.callbacks import Callback  # noqa: F401
    from tf_keras.utils import is_interactive_logging_enabled
    _KERAS_SRC = "tf_keras.src.utils.io_utils"
else:
    from keras.callbacks import Callback  # noqa: F401
    from keras.config import is_interactive_logging_enabled
    _KERAS_SRC = "keras.src.utils.io_utils"


def _public_print_msg(message, line_break=True):
    """What Keras' io_utils.print_msg does, through public API: stdout when interactive logging is on, else
    absl logging at INFO."""
    message = str(message)
    if is_interactive_logging_enabled():
        sys.stdout.write(message + "\n" if line_break else message)
        sys.stdout.flush()
    else:
        logging.info(message)


try:  # Keras' own function (its callbacks print through it); its home is private, so fall back if it moves
    import importlib
    _keras_print_msg = importlib.import_module(_KERAS_SRC).print_msg
except (ImportError, AttributeError):
    _keras_print_msg = _public_print_msg


def print_msg(message):
    """Prints a callback's message the way Keras prints its own callbacks' messages.

    Args:
        message: the text (a line break is added).
    """
    _keras_print_msg(str(message))


def optimizer_built(opt):
    """Whether a Keras optimizer has created its variables.

    Args:
        opt: a Keras 3 or tf_keras optimizer.

    Returns:
        bool: Keras 3 optimizers say so (`built`); tf_keras ones have variables once built (in their first
        apply).
    """
    built = getattr(opt, "built", None)
    return bool(built) if built is not None else len(opt.variables) > 1
