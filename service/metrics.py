"""Prometheus metrics of the gateway, on a registry of their own (one per app)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from service import __version__, manifest

# The metric names, which the load tests read the gateway's /metrics by. prometheus_client names a
# counter's family without ``_total`` and its samples with it (``ABANDONED + "_total"``); a histogram's
# samples are ``_bucket``, ``_sum`` and ``_count``.
REQUEST_LATENCY = "compcap_request_latency_seconds"
CAPTIONS_SERVED = "compcap_captions_served"
ERRORS = "compcap_errors"
BEAM_ROWS = "compcap_beam_rows_per_decoder_call"
MODEL_CALL = "compcap_model_call_seconds"
BACKEND_ERRORS = "compcap_backend_errors"
ITERATIONS_PER_REQUEST = "compcap_iterations_per_request"
QUEUE_WAIT = "compcap_queue_wait_seconds"
ACTIVE_REQUESTS = "compcap_active_requests"
QUEUE_LENGTH = "compcap_queue_length"
DECODED_TOKENS = "compcap_decoded_tokens"
HOOK_APPLICATIONS = "compcap_hook_applications"
ABANDONED = "compcap_abandoned_requests"
PACED_ERRORS = "compcap_paced_error_answers"
PACED_ABANDONERS = "compcap_paced_abandoner_requests"
READY = "compcap_ready"
QUEUE_CAPACITY = "compcap_queue_capacity"
REQUEST_DEADLINE = "compcap_request_deadline_seconds"
BUILD_INFO = "compcap_build_info"
REPO_RELOADS = "compcap_repo_reloads"
MODEL_DEVICE = "compcap_model_device_info"
DIGEST_CHARS = 12  # model_repo_digest: the first hex characters of the manifest's sha256

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 7.5, 10.0)
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MODEL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """All gateway metrics. Names start with ``compcap_``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.request_latency = Histogram(
            REQUEST_LATENCY,
            "HTTP request latency",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.captions_served = Counter(CAPTIONS_SERVED, "Images captioned", ["model"], registry=r)
        self.errors = Counter(ERRORS, "Failed requests by reason", ["reason"], registry=r)
        self.beam_rows = Histogram(
            BEAM_ROWS,
            "Rows in one <cap>_step call",
            ["model"],
            buckets=ROW_BUCKETS,
            registry=r,
        )
        self.model_call = Histogram(
            MODEL_CALL,
            "Backend model call time",
            ["model"],
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.backend_errors = Counter(
            BACKEND_ERRORS, "Backend failures by model and reason", ["model", "reason"], registry=r
        )
        self.iterations_per_request = Histogram(
            ITERATIONS_PER_REQUEST,
            "Step calls a request took part in",
            ["model"],
            buckets=(1, 2, 4, 8, 12, 16, 20, 24, 32, 48, 64, 128),
            registry=r,
        )
        self.queue_wait = Histogram(
            QUEUE_WAIT,
            "Time from submission to admission (encoding start)",
            ["model"],
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.active_requests = Gauge(
            ACTIVE_REQUESTS,
            "Requests being encoded or decoded",
            ["model"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.queue_length = Gauge(
            QUEUE_LENGTH, "Requests waiting for admission", ["model"], multiprocess_mode="livesum", registry=r
        )
        self.decoded_tokens = Counter(
            DECODED_TOKENS,
            "Beam rows evaluated by step calls (one candidate token each); rate() = tokens per second",
            ["model"],
            registry=r,
        )
        self.hook_applications = Counter(
            HOOK_APPLICATIONS,
            "Decoding-hook applications (one per hook per request per step)",
            ["hook"],
            registry=r,
        )
        self.abandoned = Counter(
            ABANDONED,
            "Requests whose caller left (disconnect, deadline) by the stage they were in: waiting (no work "
            "done), encoding (the encoder call finished for nothing), decoding, ranking",
            ["model", "stage", "reason"],
            registry=r,
        )
        self.paced_errors = Counter(
            PACED_ERRORS,
            "4xx answers delayed because their connection kept sending bad requests (error_pace_*)",
            registry=r,
        )
        self.paced_abandoners = Counter(
            PACED_ABANDONERS,
            "requests held back because their client kept closing the connection before its answer "
            "(abandon_pace_*)",
            registry=r,
        )
        self.ready = Gauge(READY, "1 once the models are loaded", multiprocess_mode="max", registry=r)
        # settings, exported so that alerts compare with the limits this process runs under
        self.queue_capacity = Gauge(
            QUEUE_CAPACITY,
            "Requests a captioner's queue holds before it answers 503 (max_queue)",
            multiprocess_mode="max",
            registry=r,
        )
        self.request_deadline = Gauge(
            REQUEST_DEADLINE,
            "Deadline of a caption request to a captioner (request_deadline_s, or per captioner where unset)",
            ["model"],
            multiprocess_mode="max",
            registry=r,
        )
        self.repo_reloads = Counter(
            REPO_RELOADS,
            "Repository reloads while serving (COMPCAP_REPO_WATCH_S, POST /v1/admin/reload), by outcome: "
            "models (loaded again), manifest (probe sets only), failed (the old one goes on serving)",
            ["outcome"],
            registry=r,
        )
        self.build_info = Gauge(
            BUILD_INFO,
            "1, labelled with the package version and the served repository's manifest digest",
            ["version", "model_repo_digest"],
            multiprocess_mode="max",
            registry=r,
        )

        self.model_device = Gauge(
            MODEL_DEVICE,
            "1 per served model, labelled with the device its calls run on (cuda, cpu) and the provider "
            "or instance kind that says so (the session's own, not the one asked for)",
            ["model", "device", "provider"],
            multiprocess_mode="max",
            registry=r,
        )

    def set_build_info(self, repo: str | Path) -> None:
        """``compcap_build_info{version, model_repo_digest} 1``: the package version and the first
        ``DIGEST_CHARS`` hex characters of the sha256 of ``repo``'s manifest.json bytes, so that a
        rollout (two versions or two repositories serving at once) shows on the dashboard."""
        digest = hashlib.sha256((Path(repo) / manifest.MANIFEST_NAME).read_bytes()).hexdigest()[:DIGEST_CHARS]
        self.build_info.clear()  # a reload: the repository served now only
        self.build_info.labels(version=__version__, model_repo_digest=digest).set(1)

    def exposition(self) -> bytes:
        """The Prometheus text: this registry's, or — where ``PROMETHEUS_MULTIPROC_DIR`` is set
        (``compcap serve --api-processes``: the HTTP processes and the engine core each write their
        metrics there) — every process's, summed as each metric says (counters and histograms added,
        gauges by their ``multiprocess_mode``), under the same names."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # set by service.gateway.split for its processes
            from prometheus_client.multiprocess import MultiProcessCollector

            merged = CollectorRegistry()
            MultiProcessCollector(merged)
            return generate_latest(merged)
        return generate_latest(self.registry)
