"""tfring on Apache Spark: `tfring.spark.run(fn, num_proc=...)` runs a function on Spark tasks as one tfring job
(like horovod.spark.run). pyspark is imported only when run() is called."""
from tfring.spark.runner import run

__all__ = ["run"]
