"""ray_logger (Horovod's horovod.ray.ray_logger): a rank of an ElasticRayExecutor job sends a dict to the driver,
where every callback given to `ElasticRayExecutor.run` is called with it. It travels over the job's signed elastic
channel as JSON (tensors and numpy scalars are converted; anything else becomes its str)."""
import json
import warnings

_warned = False


def _plain(value):
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return value.tolist()
    if hasattr(value, "numpy"):  # TensorFlow tensors
        return value.numpy().tolist()
    return str(value)


def log(info_dict):
    """Sends `info_dict` to the driver's callbacks (any rank may call it; Horovod's examples log from rank 0).

    Args:
        info_dict: a dict of JSON-able values (tensors and numpy values are converted).

    Raises:
        TypeError: info_dict is not a dict.
    """
    global _warned
    if not isinstance(info_dict, dict):
        raise TypeError("ray_logger.log: info_dict: expected a dict, got %s" % type(info_dict).__name__)
    from tfring.common.elastic import membership
    client = membership.client() if membership.enabled() else None
    if client is None:
        if not _warned:
            warnings.warn("ray_logger.log called outside an ElasticRayExecutor job: nothing is sent", stacklevel=2)
            _warned = True
        return
    from tfring.common.signed_channel import ProtocolError
    try:
        client.call("/report", {"info": json.loads(json.dumps(info_dict, default=_plain))})
    except ProtocolError as e:  # logging must not end the training
        warnings.warn("ray_logger.log: the driver did not take the values: %s" % e, stacklevel=2)
