"""What tfring's Spark estimators share: the `Store` of intermediate data, checkpoints and logs."""
from tfring.spark.common.store import LocalStore, Store

__all__ = ["LocalStore", "Store"]
