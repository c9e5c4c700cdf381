"""Prometheus metrics of the gateway, on a registry of their own (one per app)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 7.5, 10.0)
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MODEL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """All gateway metrics. Names start with ``compcap_``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.request_latency = Histogram(
            "compcap_request_latency_seconds",
            "HTTP request latency",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.captions_served = Counter("compcap_captions_served", "Images captioned", ["model"], registry=r)
        self.errors = Counter("compcap_errors", "Failed requests by reason", ["reason"], registry=r)
        self.beam_rows = Histogram(
            "compcap_beam_rows_per_decoder_call",
            "Rows in one <cap>_step call",
            ["model"],
            buckets=ROW_BUCKETS,
            registry=r,
        )
        self.model_call = Histogram(
            "compcap_model_call_seconds",
            "Backend model call time",
            ["model"],
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.backend_errors = Counter(
            "compcap_backend_errors", "Backend failures by model and reason", ["model", "reason"], registry=r
        )
        self.iterations_per_request = Histogram(
            "compcap_iterations_per_request",
            "Step calls a request took part in",
            ["model"],
            buckets=(1, 2, 4, 8, 12, 16, 20, 24, 32, 48, 64, 128),
            registry=r,
        )
        self.queue_wait = Histogram(
            "compcap_queue_wait_seconds",
            "Time from submission to admission (encoding start)",
            ["model"],
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.active_requests = Gauge(
            "compcap_active_requests", "Requests being encoded or decoded", ["model"], registry=r
        )
        self.queue_length = Gauge(
            "compcap_queue_length", "Requests waiting for admission", ["model"], registry=r
        )
        self.decoded_tokens = Counter(
            "compcap_decoded_tokens",
            "Beam rows evaluated by step calls (one candidate token each); rate() = tokens per second",
            ["model"],
            registry=r,
        )
        self.hook_applications = Counter(
            "compcap_hook_applications",
            "Decoding-hook applications (one per hook per request per step)",
            ["hook"],
            registry=r,
        )
        self.abandoned = Counter(
            "compcap_abandoned_requests",
            "Requests whose caller left (disconnect, deadline) by the stage they were in: waiting (no work "
            "done), encoding (the encoder call finished for nothing), decoding, ranking",
            ["model", "stage", "reason"],
            registry=r,
        )
        self.paced_errors = Counter(
            "compcap_paced_error_answers",
            "4xx answers delayed because their connection kept sending bad requests (error_pace_*)",
            registry=r,
        )
        self.paced_abandoners = Counter(
            "compcap_paced_abandoner_requests",
            "requests held back because their client kept closing the connection before its answer "
            "(abandon_pace_*)",
            registry=r,
        )
        self.ready = Gauge("compcap_ready", "1 once the models are loaded", registry=r)
        # settings, exported so that alerts compare with the limits this process runs under
        self.queue_capacity = Gauge(
            "compcap_queue_capacity",
            "Requests a captioner's queue holds before it answers 503 (max_queue)",
            registry=r,
        )
        self.request_deadline = Gauge(
            "compcap_request_deadline_seconds",
            "Deadline of a caption request (request_deadline_s)",
            registry=r,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
