"""``COMPCAP_STATE_URL``: checked when the settings are (SQLAlchemy is imported only then)."""

from __future__ import annotations

DEFAULT_STATE_URL = "sqlite:///compcap_state.db"
DIALECTS = ("sqlite", "postgresql")


def check_state_url(url: str) -> str:
    """``url`` if it names a store this build can open ('' = in memory); ``ValueError`` naming what
    is wrong."""
    if not url.strip():
        return ""
    import sqlalchemy as sa

    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise ValueError(
            f"{url!r} is not a database URL (e.g. sqlite:///compcap_state.db or "
            "postgresql+psycopg://user:password@host:5432/compcap)"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in DIALECTS:
        raise ValueError(f"database {backend!r} is not supported; use sqlite or postgresql")
    if backend == "postgresql" and parsed.drivername not in ("postgresql", "postgresql+psycopg"):
        raise ValueError("PostgreSQL URLs take the psycopg driver: postgresql+psycopg://...")
    return url


__all__ = ["DEFAULT_STATE_URL", "DIALECTS", "check_state_url"]
