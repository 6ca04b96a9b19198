"""What the slot launcher's services exchange: their names (in log lines and signatures), the size limit of a
message, Python objects as text (cloudpickle + base64) for the JSON of the signed channel, and the checks of a
slot's registration fields."""
import base64
import ipaddress

import cloudpickle

from tfring.common.signed_channel import BadRequest

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


def text_field(payload, key):
    """payload[key] as a non-empty string.

    Raises:
        BadRequest: naming the key.
    """
    value = payload.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest("%s: expected a non-empty string" % key)
    return value


def network_field(payload):
    """payload["network"] (a slot's interface network, "address/prefix") normalized, or None when absent.

    Raises:
        BadRequest: not an address/prefix.
    """
    value = payload.get("network")
    if value is None:
        return None
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except (TypeError, ValueError):
        raise BadRequest("network: expected an address/prefix, got %r" % (value,)) from None
