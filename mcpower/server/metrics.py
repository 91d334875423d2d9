"""``GET /metrics``: what the HTTP server did, in Prometheus' text format (the official ``prometheus-client``).

Imported by the HTTP transport only (stdio has nowhere to serve it). The metrics live in a private
``CollectorRegistry``, so two servers in one process (tests) never share counts, and nothing of the
client library's process-wide default registry is served.

- ``mcpower_tool_calls_total{tool,status,caller}``: tool calls as the audit log counts them (audit.py);
  ``status`` is ``ok`` or the error code.
- ``mcpower_search_duration_seconds``: a histogram of the search tool's time.
- ``mcpower_rate_limited_total{caller,limit}``: requests refused by auth/ratelimit.py (``limit``: rate, searches).
- ``mcpower_sessions``: MCP sessions open now; ``mcpower_datasets{status}``: datasets by status
  (``ready``, ``error``), both read when scraped.
- ``mcpower_reindex_total{dataset,result}``, ``mcpower_reindex_duration_seconds``: the watcher's
  re-indexes (``result``: published, unchanged, failed) and their time.

No ``*_created`` series: the library adds one to every counter and histogram, filtered out here.

Label values are bounded: caller names come from tokens, but OAuth subjects need not be few, so
past :data:`MAX_CALLER_LABELS` distinct callers the rest are counted as ``other``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from mcpower.registry import Registry
from mcpower.server.audit import ToolCall

# The classic text format (what generate_latest writes with its default escaping), which every
# Prometheus version reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Distinct caller label values kept; a team's named tokens are far fewer.
MAX_CALLER_LABELS = 100
MAX_LABEL_CHARS = 64
OTHER = "other"
# A search takes milliseconds (keyword, warm) to seconds (a cold model, a large dataset).
SEARCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# A re-index takes a second (one edit) to many minutes (a large folder, the first one).
REINDEX_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class _Labels:
    """The first ``limit`` distinct values as themselves (cut to a length), the rest as ``other``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        value = value[:MAX_LABEL_CHARS]
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) < self.limit:
                self._seen.add(value)
                return value
        return OTHER


class _StateCollector(Collector):
    """Sessions open and datasets by status, read when scraped (both are a look at memory)."""

    def __init__(self, registry: Registry, metrics: Metrics) -> None:
        self.registry = registry
        self.metrics = metrics

    def collect(self) -> Iterable[GaugeMetricFamily]:
        by_status: dict[str, int] = {"ready": 0, "error": 0}
        for entry in self.registry.entries():
            by_status[entry.status] = by_status.get(entry.status, 0) + 1
        datasets = GaugeMetricFamily("mcpower_datasets", "Datasets served, by status", labels=["status"])
        for status, count in sorted(by_status.items()):
            datasets.add_metric([status], count)
        yield datasets
        sessions = self.metrics.sessions
        if sessions is not None:
            yield GaugeMetricFamily("mcpower_sessions", "MCP sessions open", value=sessions())


class _WithoutCreated(Collector):
    """``registry``'s metrics without the ``*_created`` series the library adds to every counter and
    histogram (their start time: noise on a scrape). Filtered here rather than by the library's
    ``disable_created_metrics()``, which is process-wide and would change other users' registries."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        for family in self.registry.collect():
            created = family.name + "_created"
            family.samples = [s for s in family.samples if s.name != created]
            yield family


class Metrics:
    """The server's metrics: fed by the audit log, the rate limiter and the watcher; served by :meth:`endpoint`."""

    def __init__(self, registry: Registry, search_tool: str) -> None:
        self.search_tool = search_tool
        self.sessions: Callable[[], int] | None = None  # how many MCP sessions are open (set by http.py)
        self.prometheus = CollectorRegistry(auto_describe=True)
        self._callers = _Labels(MAX_CALLER_LABELS)
        self._datasets = _Labels(MAX_CALLER_LABELS)
        p = self.prometheus
        self.tool_calls = Counter(
            "mcpower_tool_calls", "Tool calls, by tool, status and caller", ["tool", "status", "caller"], registry=p
        )
        self.search_seconds = Histogram(
            "mcpower_search_duration_seconds", "Time of search tool calls", buckets=SEARCH_BUCKETS, registry=p
        )
        self.rate_limited = Counter(
            "mcpower_rate_limited", "Requests refused with 429, by caller and limit", ["caller", "limit"], registry=p
        )
        self.reindexes = Counter(
            "mcpower_reindex", "Re-indexes by the watcher, by dataset and result", ["dataset", "result"], registry=p
        )
        self.reindex_seconds = Histogram(
            "mcpower_reindex_duration_seconds", "Time of re-indexes", buckets=REINDEX_BUCKETS, registry=p
        )
        p.register(_StateCollector(registry, self))

    def tool_call(self, call: ToolCall) -> None:
        """Count a tool call (an audit.Observer)."""
        self.tool_calls.labels(call.tool, call.status[:MAX_LABEL_CHARS], self._callers(call.caller)).inc()
        if call.tool == self.search_tool:
            self.search_seconds.observe(call.duration_ms / 1000)

    def refused(self, caller: str, limit: str) -> None:
        """Count a rate-limit refusal (a ratelimit.Refused)."""
        self.rate_limited.labels(self._callers(caller), limit).inc()

    def watch_event(self, event: object) -> None:
        """Count a watcher's re-index (a Watcher's ``on_event``; other events are ignored)."""
        kind = getattr(event, "kind", None)
        dataset = self._datasets(str(getattr(event, "dataset", "")))
        report = getattr(event, "report", None)
        if kind == "reindexed" and report is not None:
            self.reindexes.labels(dataset, "published" if report.published else "unchanged").inc()
            self.reindex_seconds.observe(report.seconds)
        elif kind == "failed":
            self.reindexes.labels(dataset, "failed").inc()

    def text(self) -> bytes:
        return generate_latest(_WithoutCreated(self.prometheus))

    async def endpoint(self, request: Request) -> Response:
        """The ``GET /metrics`` route."""
        return Response(self.text(), media_type=CONTENT_TYPE)
