"""What tfring's Spark estimators share: the `Store` of intermediate data, checkpoints and logs, and the `Backend`
that runs their ranks (`SparkBackend`: tfring.spark.run with its settings)."""
from tfring.spark.common.backend import Backend, SparkBackend
from tfring.spark.common.store import LocalStore, Store

__all__ = ["Backend", "LocalStore", "SparkBackend", "Store"]
