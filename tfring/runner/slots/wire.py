"""What the slot launcher's services exchange: their names (in log lines and signatures), the size limit of a
message, and Python objects as text (cloudpickle + base64) for the JSON of the signed channel."""
import base64

import cloudpickle

MAX_BODY = 256 << 20  # pickled functions and results travel in these messages
SERVICE = "tfring slot driver"
TASK_SERVICE = "tfring task service"


def encode(obj):
    """cloudpickle + base64, for JSON messages (functions and closures travel by value).

    Args:
        obj: any picklable object.

    Returns:
        str: the encoded text.
    """
    return base64.b64encode(cloudpickle.dumps(obj)).decode("ascii")


def decode(text):
    """The inverse of `encode`. Only ever called on a message whose signature was verified.

    Args:
        text: what `encode` returned.

    Returns:
        object: the unpickled object.
    """
    return cloudpickle.loads(base64.b64decode(text))
