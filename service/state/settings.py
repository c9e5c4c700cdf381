"""The shared state's section (``COMPCAP_STATE_URL`` and the timing of what replicas share through it):
read by the HTTP kit, which opens the store, and by the features that keep state there."""

from __future__ import annotations

from typing import ClassVar, Self

from pydantic import Field, field_validator, model_validator

from service.sections import Section
from service.state.url import DEFAULT_STATE_URL, check_state_url


class StateSettings(Section):
    """The shared state's section: where it is, and how often replicas write, read and take over."""

    title: ClassVar[str] = "Shared state"

    state_url: str = Field(
        default=DEFAULT_STATE_URL,
        description="the shared state (probe jobs, history, baselines, shadow reservoir, leases): an "
        "SQLite file for one host (sqlite:///path.db), PostgreSQL for replicas on several "
        "(postgresql+psycopg://user:password@host:5432/db); '' = in memory, this process only",
    )
    state_heartbeat_s: float = Field(
        default=2.0,
        gt=0.0,
        le=60.0,
        description="how often a replica writes its running jobs' progress "
        "and reads the cancels other replicas ask for",
    )
    state_stale_s: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="a job whose replica wrote nothing for this long is "
        "marked failed (the replica died); more than twice state_heartbeat_s",
    )
    state_lease_s: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="time to live of the probe schedule's lease: how "
        "soon another replica takes the schedule over from one that died",
    )

    @field_validator("state_url")
    @classmethod
    def _state_url_known(cls, value: str) -> str:
        return check_state_url(value)

    @model_validator(mode="after")
    def _stale_after_heartbeats(self) -> Self:
        if self.state_stale_s <= 2 * self.state_heartbeat_s:
            raise ValueError(
                f"state_stale_s: must be more than twice state_heartbeat_s ({self.state_heartbeat_s:g} s), "
                f"got {self.state_stale_s:g} s"
            )
        return self
