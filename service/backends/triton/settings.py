"""The Triton backend's section (``COMPCAP_TRITON_URL``, ``COMPCAP_TRITON_RESOLVE_S``,
``COMPCAP_TRITON_STARTUP_S``, ``COMPCAP_TRITON_SHARED_MEMORY``): where the servers are and how they are
reached. Its record (``service.backends.registry``) names these fields and checks ``triton_url``'s form
where the backend is Triton (``service.backends.triton.url``); ``service.backends.settings`` joins it to
the other backends' sections. Imports no tritonclient."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from service.sections import Section


class TritonSettings(Section):
    """The Triton backend's section: its servers' address(es), how often a DNS name is resolved again,
    how long start-up waits for them, and whether tensors go through shared memory."""

    title: ClassVar[str] = "Triton backend"

    triton_url: str = Field(
        default="127.0.0.1:8001",
        json_schema_extra={"doc_type": "host:port, list of host:port, or dns:///name:port"},
        description="Triton gRPC address(es) (backend=triton): host:port; host:port,host:port (a list); or "
        "dns:///name:port, every address the name resolves to, resolved again every triton_resolve_s (a "
        "headless Service's name lists its ready pods). Calls go to the healthy address with the fewest "
        "in flight; one whose server goes away is ejected and probed before it gets calls again",
    )
    triton_resolve_s: float = Field(
        default=10.0, gt=0, le=3600, description="seconds between two resolutions of a dns:/// triton_url"
    )
    triton_startup_s: float = Field(
        default=300.0,
        gt=0,
        le=86400,
        description="seconds the gateway waits at start-up for a Triton address with every model ready and "
        "the manifest's (Triton's own startup budget in k8s/); /readyz answers 503 meanwhile",
    )
    triton_shared_memory: bool = Field(
        default=False,
        description="send tensors through system shared memory (co-located Triton only: one host:port, "
        "not a list or a dns:/// name)",
    )
