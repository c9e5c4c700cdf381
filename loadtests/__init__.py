"""Benchmarks that print figures (latency, later throughput under load)."""
