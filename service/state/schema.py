"""The tables of the shared state (SQLAlchemy Core), one ``MetaData`` for every migration to create
from. A change to a table is a new migration in ``service.state.migrations``, never an edit here
alone."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

schema_version = sa.Table(
    "compcap_schema_version",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("description", sa.String(200), nullable=False),
    sa.Column("applied_at", sa.Double, nullable=False),
)

# one row per probe job, whichever replica runs it; succeeded rows are the probe history
probe_jobs = sa.Table(
    "probe_jobs",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("ranker", sa.String(200), nullable=False),  # '' for a plain beam search
    sa.Column("probe_set", sa.String(200), nullable=False),
    sa.Column("params", sa.JSON, nullable=False),
    sa.Column("scheduled", sa.Boolean, nullable=False, default=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("done", sa.Integer, nullable=False, default=0),
    sa.Column("total", sa.Integer, nullable=False, default=0),
    sa.Column("timings", sa.JSON, nullable=False),
    sa.Column("partial", sa.JSON),
    sa.Column("result", sa.JSON),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("started_at", sa.Double),
    sa.Column("finished_at", sa.Double),
    sa.Column("accepted_at", sa.Double),
    sa.Column("replica", sa.String(200), nullable=False),  # the replica that runs (ran) it
    sa.Column("heartbeat_at", sa.Double, nullable=False),  # its last sign of life while unfinished
    sa.Column("cancel_requested", sa.Boolean, nullable=False, default=False),
    sa.Index("probe_jobs_status", "status"),
    sa.Index("probe_jobs_created", "created_at"),
    sa.Index("probe_jobs_latest", "kind", "model", "ranker", "probe_set", "finished_at"),
)

# the accepted result of each (kind, model, ranker, probe set): the baseline alerts compare with
probe_baselines = sa.Table(
    "probe_baselines",
    metadata,
    sa.Column("kind", sa.String(64), primary_key=True),
    sa.Column("model", sa.String(200), primary_key=True),
    sa.Column("ranker", sa.String(200), primary_key=True),
    sa.Column("probe_set", sa.String(200), primary_key=True),
    sa.Column("job_id", sa.String(64), nullable=False),
    sa.Column("result", sa.JSON, nullable=False),
    sa.Column("accepted_at", sa.Double, nullable=False),
)

# named leases: the holder runs what the lease guards (the probe schedule) until it expires
leases = sa.Table(
    "leases",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
)

# the shadow comparison's reservoir: the most discrepant live images, shared by every replica
shadow_items = sa.Table(
    "shadow_items",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("shadow", sa.String(200), nullable=False),
    sa.Column("similarity", sa.Double, nullable=False),
    sa.Column("tie_break", sa.Double, nullable=False),
    sa.Column("size_bytes", sa.Integer, nullable=False),
    sa.Column("payload", sa.JSON, nullable=False),
    sa.Index("shadow_items_order", "shadow", "similarity", "tie_break", "id"),
)

shadow_counters = sa.Table(
    "shadow_counters",
    metadata,
    sa.Column("shadow", sa.String(200), primary_key=True),
    sa.Column("seen", sa.BigInteger, nullable=False),
    sa.Column("refused", sa.BigInteger, nullable=False),
)

# ``POST /v1/admin/reload`` on any replica: each replica reloads its repository when the generation it
# last saw is behind this one (``service.api.reload``)
repo_reloads = sa.Table(
    "repo_reloads",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("force", sa.Boolean, nullable=False),  # reload the models even if the files look the same
    sa.Column("requested_at", sa.Double, nullable=False),
    sa.Column("replica", sa.String(200), nullable=False),
)

__all__ = [
    "leases",
    "metadata",
    "probe_baselines",
    "probe_jobs",
    "repo_reloads",
    "schema_version",
    "shadow_counters",
    "shadow_items",
]
