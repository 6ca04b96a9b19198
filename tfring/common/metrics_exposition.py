"""The Prometheus exposition of the monitor's summary and the elastic events (docs/observability.md lists each metric),
built with prometheus_client from the latest summary at scrape time: the values are exactly `hvd.metrics()`'s, in
base units (seconds, bytes). Per-rank series carry a `rank` label; rank 0 serves them all."""
import math

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tfring.common import monitor, topology
from tfring.common.elastic import membership

# (name, help, the rank's dict key in `total` (counter) or in the round (gauge), scale to base units)
_RANK_COUNTERS = (
    ("tfring_rank_wait_seconds", "Time this rank's collectives waited for the other ranks, since init", "wait_s", 1),
    ("tfring_rank_transfer_seconds", "Time in transfers (the MPI/NCCL call, copies included), since init",
     "transfer_s", 1),
    ("tfring_rank_reduced_bytes", "Bytes allreduced and reducescattered, since init", "bytes_reduced", 1),
    ("tfring_rank_collectives", "Collectives executed, since init", "collectives", 1),
)
_RANK_GAUGES = (
    ("tfring_rank_wait_seconds_per_step", "Wait per step in the latest monitor round", "wait_ms_per_step", 1e-3),
    ("tfring_rank_bus_bandwidth_gbps", "Bus bandwidth in the latest monitor round (nccl-tests' definition), GB/s",
     "busbw_gbps", 1),
)


def _gauge(name, doc, value):
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], float("nan") if value is None else float(value))
    return g


def _counter(name, doc, value):
    c = CounterMetricFamily(name, doc)
    c.add_metric([], float(value or 0))
    return c


class _Collector:
    """Reads the latest summary at each scrape (nothing is cached between scrapes)."""

    def collect(self):
        summary = monitor.metrics() or {}
        yield _gauge("tfring_size", "Ranks in the job now", summary.get("size", topology.size()))
        yield _counter("tfring_monitor_rounds", "Monitor rounds (per-rank statistics gathered at rank 0)",
                       summary.get("round"))
        yield _counter("tfring_steps", "Training steps since init (marked, or inferred)", summary.get("total_steps"))
        step = summary.get("step_ms")
        yield _gauge("tfring_step_seconds", "Step time in the latest monitor round (NaN: no step ended in it)",
                     None if step is None else step / 1e3)
        ranks = summary.get("ranks") or []
        for name, doc, key, scale in _RANK_COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["rank"])
            for r in ranks:
                family.add_metric([str(r["rank"])], r["total"][key] * scale)
            yield family
        for name, doc, key, scale in _RANK_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["rank"])
            for r in ranks:
                family.add_metric([str(r["rank"])], (r[key] or 0) * scale)
            yield family
        for who, doc in (("slowest", "the others waited for most in the latest round"),
                         ("straggler", "the others persistently wait for (-1: none)")):
            found = summary.get(who) or {}
            yield _gauge("tfring_%s_rank" % who, "The rank %s" % doc, found.get("rank", -1))
            waited = found.get("waited_ms_per_step")
            yield _gauge("tfring_%s_wait_seconds_per_step" % who, "How long per step the others waited for it",
                         0.0 if waited is None or math.isnan(waited) else waited / 1e3)
        events = membership.events()
        yield _counter("tfring_elastic_resets", "Elastic resets (failures and growths) since the job started",
                       events["resets"])
        yield _counter("tfring_elastic_ranks_lost", "Ranks lost in elastic resets", events["ranks_lost"])
        yield _counter("tfring_elastic_ranks_added", "Ranks added by elastic growth", events["ranks_added"])


_registry = CollectorRegistry(auto_describe=False)
_registry.register(_Collector())


def exposition():
    """(content type, body) of one scrape."""
    return CONTENT_TYPE_LATEST, generate_latest(_registry)
