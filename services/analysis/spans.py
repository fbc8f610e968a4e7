"""Spans as the analysis sees them, read from what tracing systems write: an OTLP export request (protobuf, as the
OpenTelemetry SDKs and Triton send it, or OTLP/JSON), a file of OTLP/JSON lines, or a Jaeger JSON export."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    """Event name -> time (ns); Triton's timestamps (QUEUE_START, COMPUTE_START, ...) arrive as events."""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def _any(value: AnyValue) -> str | bool | int | float | None:
    kind = value.WhichOneof("value")
    if kind in ("array_value", "kvlist_value", "bytes_value") or kind is None:
        return str(getattr(value, kind)) if kind else None
    return getattr(value, kind)


def from_protobuf(body: bytes) -> list[Span]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _any(kv.value) for kv in resource_spans.resource.attributes}
        service = str(resource.get("service.name", "unknown"))
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                spans.append(
                    Span(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        service=service,
                        name=s.name,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes={kv.key: _any(kv.value) for kv in s.attributes},
                        events={e.name: e.time_unix_nano for e in s.events},
                    )
                )
    return spans


def _json_value(value: dict) -> str | bool | int | float | None:
    for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if key in value:
            return int(value[key]) if key == "intValue" else value[key]
    return None


def from_otlp_json(document: dict) -> list[Span]:
    """OTLP/JSON (ids in hex, as the OTLP/JSON encoding specifies)."""
    spans = []
    for resource_spans in document.get("resourceSpans", []):
        resource = {a["key"]: _json_value(a["value"]) for a in resource_spans.get("resource", {}).get("attributes", [])}
        service = str(resource.get("service.name", "unknown"))
        for scope_spans in resource_spans.get("scopeSpans", []):
            for s in scope_spans.get("spans", []):
                spans.append(
                    Span(
                        trace_id=s["traceId"].lower(),
                        span_id=s["spanId"].lower(),
                        parent_id=(s.get("parentSpanId") or "").lower(),
                        service=service,
                        name=s["name"],
                        start_ns=int(s["startTimeUnixNano"]),
                        end_ns=int(s["endTimeUnixNano"]),
                        attributes={a["key"]: _json_value(a["value"]) for a in s.get("attributes", [])},
                        events={e["name"]: int(e["timeUnixNano"]) for e in s.get("events", [])},
                    )
                )
    return spans


def from_jaeger(document: dict) -> list[Span]:
    """A Jaeger UI/API export (`{"data": [{"traceID", "spans", "processes"}]}`), times in microseconds."""
    spans = []
    for trace in document.get("data", []):
        processes = {pid: p.get("serviceName", "unknown") for pid, p in trace.get("processes", {}).items()}
        for s in trace.get("spans", []):
            parent = next((r["spanID"] for r in s.get("references", []) if r.get("refType") == "CHILD_OF"), "")
            start = int(s["startTime"]) * 1000
            spans.append(
                Span(
                    trace_id=s["traceID"].rjust(32, "0"),
                    span_id=s["spanID"],
                    parent_id=parent,
                    service=processes.get(s.get("processID"), "unknown"),
                    name=s["operationName"],
                    start_ns=start,
                    end_ns=start + int(s["duration"]) * 1000,
                    attributes={t["key"]: t.get("value") for t in s.get("tags", [])},
                    events={
                        f.get("value"): int(log["timestamp"]) * 1000
                        for log in s.get("logs", [])
                        for f in log.get("fields", [])
                        if f.get("key") in ("event", "message")
                    },
                )
            )
    return spans


def read_file(path: Path) -> list[Span]:
    """A Jaeger JSON export, an OTLP/JSON document, or OTLP/JSON lines (one export request a line)."""
    text = Path(path).read_text()
    try:
        documents = [json.loads(text)]
    except json.JSONDecodeError:
        documents = [json.loads(line) for line in text.splitlines() if line.strip()]
    spans = []
    for document in documents:
        spans += from_jaeger(document) if "data" in document else from_otlp_json(document)
    return spans
