"""The probes' settings section (``COMPCAP_MAX_PROBE_JOBS``, ``COMPCAP_PROBE_SCHEDULE``), collected
into ``service.settings.Settings``."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from service.sections import FeatureSection, blank_is_none


class ProbeSettings(FeatureSection):
    """The probes' section. The schedule is parsed by ``service.probes`` when it installs."""

    feature: ClassVar[str] = "probes"
    title: ClassVar[str] = "Probes"
    needs_feature: ClassVar[tuple[str, ...]] = ("probe_schedule",)

    max_probe_jobs: int = Field(
        default=2, ge=1, le=64, description="probe jobs running at once; more get 429 with Retry-After"
    )
    probe_schedule: str | None = Field(
        default=None,
        description="probes the gateway runs by itself, e.g. "
        "'every=15m;kinds=systematicity,substitutivity;models=butr+butr,butd;images=20' "
        "(service/probes/jobs/schedule.py)",
    )
    _schedule_blank = field_validator("probe_schedule")(blank_is_none)
