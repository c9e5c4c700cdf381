"""CompCap online service: gateway, engine and backends. Imports without torch."""

__version__ = "0.1.0"
