"""An OTLP/HTTP receiver for tests: a real HTTP server decoding what the exporters send.

It decodes `ExportTraceServiceRequest` and `ExportMetricsServiceRequest` protobufs with
`opentelemetry-proto` (as a collector would) and keeps the spans and metric points, each
with its resource's `service.name`.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def plain(value: AnyValue) -> Any:
    """An OTLP attribute value as a Python value."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int


@dataclass(frozen=True)
class Point:
    service: str
    metric: str
    attributes: dict[str, Any]
    count: int
    total: float


@dataclass
class Received:
    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: plain(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    found.append(
                        Span(
                            service=str(resource.get("service.name")),
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            attributes={a.key: plain(a.value) for a in s.attributes},
                            status_code=s.status.code,
                        )
                    )
        with self.lock:
            self.spans.extend(found)

    def add_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_metrics in request.resource_metrics:
            resource = {a.key: plain(a.value) for a in resource_metrics.resource.attributes}
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    if kind in ("sum", "gauge"):  # a counter's total, a gauge's value: count 1
                        for n in getattr(metric, kind).data_points:
                            value = n.as_double if n.HasField("as_double") else n.as_int
                            found.append(
                                Point(
                                    service=str(resource.get("service.name")),
                                    metric=metric.name,
                                    attributes={a.key: plain(a.value) for a in n.attributes},
                                    count=1,
                                    total=float(value),
                                )
                            )
                        continue
                    if kind != "histogram":
                        continue
                    for p in metric.histogram.data_points:
                        found.append(
                            Point(
                                service=str(resource.get("service.name")),
                                metric=metric.name,
                                attributes={a.key: plain(a.value) for a in p.attributes},
                                count=p.count,
                                total=p.sum,
                            )
                        )
        with self.lock:
            self.points.extend(found)

    def snapshot(self) -> tuple[list[Span], list[Point]]:
        with self.lock:
            return list(self.spans), list(self.points)

    def wait(self, predicate: Any, timeout: float = 30) -> list[Span]:
        """The spans once `predicate(spans)` holds (the last ones seen if it never does)."""
        deadline = time.monotonic() + timeout
        while True:
            spans, _ = self.snapshot()
            if predicate(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP endpoint on a free loopback port: (its base URL, what it received)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                received.add_traces(body)
                reply = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                received.add_metrics(body)
                reply = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
