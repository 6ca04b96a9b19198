"""tfring on Apache Spark: `tfring.spark.run(fn, num_proc=...)` runs a function on Spark tasks as one tfring job
(like horovod.spark.run);
`tfring.spark.run_elastic(fn, num_proc=..., min_num_proc=..., max_num_proc=...)` an elastic one.
pyspark is imported only when run() is called."""
from tfring.spark.elastic import run_elastic
from tfring.spark.runner import run

__all__ = ["run", "run_elastic"]
