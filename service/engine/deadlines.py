"""A caption request's deadline, per captioner: ``COMPCAP_REQUEST_DEADLINE_S`` where it is set, for
every model; else ``BASE_DEADLINE_S``, or ``DEADLINE_CAPTIONS`` times the captioner's single-caption
time where that is longer (``CaptionerEntry.single_caption_ms``, measured when ``compcap import hf``
imported it). So a real-size imported model, whose one caption takes about a second on two cores, is
not cut off at modest load by a deadline made for models a hundred times faster, and the shipped
models keep theirs. The drain of a stopping gateway and the wait for an upload's next bytes stay at
the base (``base_deadline_s``): Kubernetes' grace periods count on them. Pure."""

from __future__ import annotations

from service.engine.settings import EngineSettings
from service.manifest import CaptionerEntry

BASE_DEADLINE_S = 10.0
# a request may wait behind about this many captions' work: at 8 clients a real-size ViT-base + GPT-2's
# p50 is 4 single-caption times, so 30 covers some 60 clients on the machine it was measured on
DEADLINE_CAPTIONS = 30
SETTING = "COMPCAP_REQUEST_DEADLINE_S"


def base_deadline_s(settings: EngineSettings) -> float:
    """The deadline set (``request_deadline_s``), else ``BASE_DEADLINE_S``: the drain of a stopping
    gateway, the longest an upload may stop arriving, a request before its model is known."""
    return settings.request_deadline_s or BASE_DEADLINE_S


def request_deadline_s(settings: EngineSettings, captioner: CaptionerEntry | None) -> float:
    """The deadline of a request to ``captioner`` (module docstring; None: a request whose captioner is
    not known yet)."""
    if settings.request_deadline_s is not None or captioner is None or captioner.single_caption_ms is None:
        return base_deadline_s(settings)
    return max(BASE_DEADLINE_S, DEADLINE_CAPTIONS * captioner.single_caption_ms / 1e3)


def deadline_reason(settings: EngineSettings, captioner: CaptionerEntry | None) -> str:
    """Why a request to ``captioner`` has the deadline it has, and what sets another: the end of a 504's
    message."""
    if settings.request_deadline_s is not None:
        return f"{SETTING}={settings.request_deadline_s:g}"
    deadline = request_deadline_s(settings, captioner)
    if captioner is not None and captioner.single_caption_ms is not None and deadline > BASE_DEADLINE_S:
        why = (
            f"{DEADLINE_CAPTIONS} times {captioner.name}'s single caption, "
            f"{captioner.single_caption_ms / 1e3:.2f} s when it was imported"
        )
    else:
        why = "the default"
    return f"{why}; set {SETTING} to wait longer"


__all__ = [
    "BASE_DEADLINE_S",
    "DEADLINE_CAPTIONS",
    "base_deadline_s",
    "deadline_reason",
    "request_deadline_s",
]
