"""The tfring Lightning strategy (tfring.spark.lightning.strategy) at np=2 without Spark: automatic optimization,
manual optimization (the same losses: gradients are averaged inside the step either way), gradient accumulation with
clipping, and LBFGS (a closure called several times per step) each end with identical weights on both ranks and a
falling loss."""
import importlib.util
import json
import os

import pytest

# Only the ranks import Lightning.
if importlib.util.find_spec("lightning") is None:
    pytest.skip("lightning is not installed", allow_module_level=True)
pytest.importorskip("pyarrow")
sklearn_datasets = pytest.importorskip("sklearn.datasets")

from conftest import ROOT, run_ranks  # noqa: E402

pytestmark = pytest.mark.slow  # launches ranks


def test_every_optimization_mode_ends_with_identical_weights_on_both_ranks(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    d = sklearn_datasets.load_digits()
    x = (d.data[:1500] / 16.0).astype("float32")
    (tmp_path / "train").mkdir()
    pq.write_table(pa.table({"features": pa.array(list(x), type=pa.list_(pa.float32())), "label": d.target[:1500]}),
                   str(tmp_path / "train" / "part.parquet"), row_group_size=200)
    job = os.path.join(ROOT, "tests", "engines", "lightning_strategy_job.py")
    proc = run_ranks(2, [job, str(tmp_path / "train"), str(tmp_path / "runs")], timeout=300)
    assert proc.returncode == 0, proc.stdout[-10000:]
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in proc.stdout.splitlines() if "RESULT " in line]
    by_case = {}
    for r in results:
        by_case.setdefault(r["case"], {})[r["rank"]] = r
    assert sorted(by_case) == ["accumulate", "automatic", "lbfgs", "manual", "sgd"], proc.stdout[-5000:]
    for case, ranks in by_case.items():
        assert ranks[0]["digest"] == ranks[1]["digest"], case
        losses = ranks[0]["losses"]
        assert len(losses) == 2 and losses[1] < losses[0], (case, losses)
    # Plain SGD: the strategy averages the ranks' gradients (Sum would move `offset` twice as far; the learning
    # rate is the module's times the 2 ranks, as Horovod's strategy scales it), and a value logged with
    # sync_dist=True is the ranks' mean on every rank (#44 items 1 and 14).
    for rank, r in by_case["sgd"].items():
        assert r["steps"] > 10 and r["offset"] == pytest.approx([-r["lr"] * 2 * r["steps"]] * 3, rel=1e-4), r
        assert r["seen"] == [0.5, 0.5], (rank, r["seen"])
    automatic, manual = by_case["automatic"][0], by_case["manual"][0]
    assert manual["losses"] == pytest.approx(automatic["losses"], rel=1e-4), (automatic, manual)
    print({c: by_case[c][0]["losses"] for c in by_case})
