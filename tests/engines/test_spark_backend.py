"""tfring.spark.common.backend.SparkBackend (Horovod's): its settings reach tfring.spark.run, the env merges, and
arguments tfring.spark.run does not take are refused. The estimators' fits through a SparkBackend run on real Spark
in test_spark_estimator.py (Keras) and test_spark_torch_estimator.py (torch)."""
import pytest

pytest.importorskip("pyspark")

import tfring.spark  # noqa: E402
from tfring.spark.common.backend import Backend, SparkBackend  # noqa: E402


def test_run_passes_the_settings_and_the_merged_env_to_tfring_spark_run(monkeypatch):
    calls = []
    monkeypatch.setattr(tfring.spark, "run", lambda fn, **kw: calls.append((fn, kw)) or ["r0", "r1"])
    backend = SparkBackend(num_proc=2, env={"A": "1", "B": "1"}, stdout="out", stderr="err",
                           prefix_output_with_timestamp=True, verbose=2)
    assert isinstance(backend, Backend) and backend.num_processes() == 2
    assert backend.run(len, args=("x",), env={"B": "2", "C": "3"}) == ["r0", "r1"]
    assert calls == [(len, dict(args=("x",), kwargs=None, num_proc=2, env={"A": "1", "B": "2", "C": "3"},
                                stdout="out", stderr="err", prefix_output_with_timestamp=True, verbose=2))]


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="takes no argument\\(s\\) use_hdfs"):
        SparkBackend(num_proc=2, use_hdfs=True)
    with pytest.raises(ValueError, match="num_proc=0 must be a positive integer"):
        SparkBackend(num_proc=0)
    with pytest.raises(NotImplementedError):
        Backend().run(len)


def test_num_proc_defaults_to_the_spark_contexts_parallelism(monkeypatch):
    from pyspark import SparkContext
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    with pytest.raises(RuntimeError, match="no active SparkContext"):
        SparkBackend()
    monkeypatch.setattr(SparkContext, "_active_spark_context", type("Context", (), {"defaultParallelism": 3})())
    assert SparkBackend().num_processes() == 3
