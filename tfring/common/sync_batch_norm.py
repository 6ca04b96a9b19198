"""What every SyncBatchNormalization (Keras 3 on any backend, tf_keras) refuses, framework-free."""


def check_options(fused, synchronized):
    """Fused kernels compute local statistics; `synchronized` is tf.distribute's own cross-replica mode.

    Args:
        fused: must be False.
        synchronized: must be False.

    Raises:
        ValueError: either is set.
    """
    if fused in (True, None):
        raise ValueError("SyncBatchNormalization: fused=%r is not supported (the fused kernel computes local "
                         "statistics); use fused=False" % (fused,))
    if synchronized:
        raise ValueError("SyncBatchNormalization: synchronized=True is tf.distribute's synchronization; tfring "
                         "synchronizes over process_set already, leave synchronized=False")
