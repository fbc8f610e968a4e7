"""Tracing-based bottleneck analysis: the stack's own OTLP receiver and span store, the per-stage decomposition of
end-to-end latency, the verdict across load levels, and its report (`serving analyze`)."""
