"""Load generation and benchmarks: what users run to decide which stack to deploy."""
