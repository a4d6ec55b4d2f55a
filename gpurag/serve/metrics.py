"""Counters, gauges and histograms rendered in the Prometheus text format (no dependency)."""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    if not pairs:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + body + "}"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(x: float) -> str:
    return repr(float(x)) if isinstance(x, float) else str(x)


class Histogram:
    """Cumulative buckets, a sum and a count per label set."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.data: dict[tuple, list] = {}

    def observe(self, labels: tuple, value: float) -> None:
        entry = self.data.setdefault(labels, [[0] * (len(self.buckets) + 1), 0.0])
        entry[0][bisect.bisect_left(self.buckets, value)] += 1
        entry[1] += value

    def render(self, name: str) -> list[str]:
        out = []
        for labels, (counts, total) in sorted(self.data.items()):
            running = 0
            for bound, n in zip((*self.buckets, float("inf")), counts, strict=True):
                running += n
                le = "+Inf" if bound == float("inf") else _num(bound)
                out.append(f"{name}_bucket{_labels((*labels, ('le', le)))} {running}")
            out.append(f"{name}_sum{_labels(labels)} {_num(total)}")
            out.append(f"{name}_count{_labels(labels)} {running}")
        return out


class Metrics:
    """What ``GET /metrics`` exposes; safe to update from the event loop and worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple, int] = defaultdict(int)
        self.latency = Histogram(LATENCY_BUCKETS)
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.batch_seconds = Histogram(LATENCY_BUCKETS)
        self.questions = 0
        self.shed = 0
        self.reloads: dict[str, int] = defaultdict(int)
        self.queue_depth = 0
        self.in_flight = 0
        self.index_version = ""
        self.index_loaded_at = 0.0

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one request; a method outside :data:`METHODS` is labelled ``other`` (a
        client may send any method name: the series must stay bounded)."""
        method = method if method in METHODS else "other"
        with self._lock:
            self.requests[(("route", route), ("method", method), ("status", str(status)))] += 1
            self.latency.observe((("route", route),), seconds)

    def batch(self, size: int, seconds: float) -> None:
        with self._lock:
            self.batch_size.observe((), size)
            self.batch_seconds.observe((), seconds)
            self.questions += size

    def reload(self, outcome: str) -> None:
        with self._lock:
            self.reloads[outcome] += 1

    def render(self) -> str:
        with self._lock:
            lines = [
                "# HELP gpurag_http_requests_total HTTP requests by route, method and status.",
                "# TYPE gpurag_http_requests_total counter",
                *(f"gpurag_http_requests_total{_labels(k)} {v}"
                  for k, v in sorted(self.requests.items())),
                "# HELP gpurag_http_request_duration_seconds Request latency.",
                "# TYPE gpurag_http_request_duration_seconds histogram",
                *self.latency.render("gpurag_http_request_duration_seconds"),
                "# HELP gpurag_batch_size Questions per Index.query_batch call.",
                "# TYPE gpurag_batch_size histogram",
                *self.batch_size.render("gpurag_batch_size"),
                "# HELP gpurag_batch_duration_seconds Time of one Index.query_batch call.",
                "# TYPE gpurag_batch_duration_seconds histogram",
                *self.batch_seconds.render("gpurag_batch_duration_seconds"),
                "# HELP gpurag_questions_total Questions answered by the retrieval engine.",
                "# TYPE gpurag_questions_total counter",
                f"gpurag_questions_total {self.questions}",
                "# HELP gpurag_shed_total Requests refused with 503 because the queue was full.",
                "# TYPE gpurag_shed_total counter",
                f"gpurag_shed_total {self.shed}",
                "# HELP gpurag_queue_depth Questions waiting for a batch.",
                "# TYPE gpurag_queue_depth gauge",
                f"gpurag_queue_depth {self.queue_depth}",
                "# HELP gpurag_in_flight_requests Requests being handled.",
                "# TYPE gpurag_in_flight_requests gauge",
                f"gpurag_in_flight_requests {self.in_flight}",
                "# HELP gpurag_index_reloads_total Index reload attempts by outcome.",
                "# TYPE gpurag_index_reloads_total counter",
                *(f"gpurag_index_reloads_total{_labels((('outcome', k),))} {v}"
                  for k, v in sorted(self.reloads.items())),
                "# HELP gpurag_index_info The index version served (value 1).",
                "# TYPE gpurag_index_info gauge",
                f"gpurag_index_info{_labels((('version', self.index_version),))} 1",
                "# HELP gpurag_index_loaded_timestamp_seconds When the served index was loaded.",
                "# TYPE gpurag_index_loaded_timestamp_seconds gauge",
                f"gpurag_index_loaded_timestamp_seconds {_num(self.index_loaded_at)}",
            ]
        return "\n".join(lines) + "\n"
