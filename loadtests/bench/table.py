"""The summary table ``compcap bench`` prints for its result (one row per load level)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from loadtests.bench.ceiling import ceiling_of_limit


def summary(result: dict[str, Any]) -> Table:
    if result["backend"] == "null":
        return null_summary(result)
    limit = result["limit"]["ideal_captions_per_s"]
    naive = result["naive"]["captions_per_s"]
    table = Table(
        title=f"compcap bench — {result['backend']} {result.get('precision', 'fp32')}, {result['model']}, "
        f"beam {result['beam_size']}",
        width=170,
    )
    setup = _setup_columns(result["load"])
    for col in (
        *setup,
        "clients",
        "captions/s",
        "% of limit",
        "ceiling",
        "% of compute",
        "× naive",
        "p50 ms",
        "p99 ms",
        "rows/call",
        "step ms load/own/best",
        "sent",
        "recv",
        "5xx",
        "bound any/floor",
        "CPU ms srv(loop)/cli",
        "srv CPU ms above models",
        *(
            [f"{peer_name} cap/s", f"× {peer_name}", f"{peer_name} p50"]
            if (peer_name := (result.get("baseline") or {}).get("name"))
            else []
        ),
    ):
        table.add_column(col, justify="right")
    peers = {r["clients"]: r for r in (result.get("baseline") or {}).get("load", [])}
    for row in result["load"]:
        peer = [] if not peers else _peer_cells(row, peers.get(row["clients"]))
        table.add_row(
            *_setup_cells(row, setup),
            str(row["clients"]),
            f"{row['captions_per_s']:.1f}",
            f"{100 * row['captions_per_s'] / limit:.0f}%",
            f"{100 * ceiling_of_limit(result, row['mean_rows_per_call']):.0f}%",
            f"{100 * row['captions_per_s'] / result['compute_limit']['captions_per_s']:.0f}%",
            f"{row['captions_per_s'] / naive:.2f}",
            str(row["p50_ms"]),
            str(row["p99_ms"]),
            f"{row['mean_rows_per_call']:.1f}",
            _step_cell(row),
            str(row["sent"]),
            str(row["received"]),
            str(row["errors_5xx"]),
            *_cpu_cells(row),
            f"{row['gateway_cpu_ms_above_models']:.1f}" if "gateway_cpu_ms_above_models" in row else "-",
            *peer,
        )
    table.caption = (
        f"single decode {result['single_decode_ms']:.1f} ms; "
        f"limit {result['limit']['rows_per_s']:.0f} rows/s at {result['limit']['best_batch_rows']} rows "
        f"= {limit:.1f} captions/s "
        f"({result['rows_per_caption']:.0f} rows per caption); naive {naive:.1f} captions/s; all model "
        f"calls of a caption at large batches: {result['compute_limit']['captions_per_s']:.0f} captions/s "
        f"(step share {100 * result['compute_limit']['step_share']:.0f}%); ceiling = the % of the limit a "
        "gateway with zero overhead could reach at that level's rows per call; bound any/floor = the % "
        f"of the limit {result['cpu_count']} busy cores allow at the models' CPU per caption plus the load "
        "generator's (any server) or plus the HTTP floor's server and client CPU (onnxruntime only: on "
        "Triton the models' CPU is spent in tritonserver); step ms load/own/best = a step call's wall time "
        "in the gateway under that load vs alone at the same rows with the gateway's own threads per "
        "call, and with the fastest thread setting measured (the ceiling assumes that); CPU ms "
        "srv(loop) = the gateway's CPU per caption (of it, its event-loop thread's); above models = "
        "the gateway's CPU per caption less the models' own at that level's rows per call"
        + (
            f"; gateway without cross-request batching at {naive_http['clients']} clients: "
            f"{naive_http['captions_per_s']:.1f} captions/s"
            if (naive_http := result["naive"].get("gateway"))
            else ""
        )
    )
    return table


def _setup_columns(load: list[dict[str, Any]]) -> tuple[str, ...]:
    """The columns that tell a run's load rows apart beyond their clients: the round (``--rounds``), the
    gateways and the API processes where some row has more than one."""
    return (
        *(("round",) if any("round" in row for row in load) else ()),
        *(("gateways",) if any(row.get("gateways", 1) != 1 for row in load) else ()),
        *(("API procs",) if any(row.get("api_processes", 1) != 1 for row in load) else ()),
    )


def _setup_cells(row: dict[str, Any], columns: tuple[str, ...]) -> list[str]:
    keys = {"round": "round", "gateways": "gateways", "API procs": "api_processes"}
    return [str(row.get(keys[column], 1)) for column in columns]


def null_summary(result: dict[str, Any]) -> Table:
    """The table of a ``--backend null`` run: the gateway's own ceiling per gateway processes and clients,
    its CPU per caption and captions/s per core it kept busy (no limit to compare with: none measured)."""
    table = Table(
        title=f"compcap bench --backend null — the gateway's own ceiling, {result['model']}, beam "
        f"{result['beam_size']}, {result['cpu_count']} cores",
        width=150,
    )
    rounds = ("round",) if any("round" in row for row in result["load"]) else ()
    for col in (
        *rounds,
        "gateways",
        "API procs",
        "clients",
        "captions/s",
        "p50 ms",
        "p99 ms",
        "rows/call",
        "CPU ms srv(loop)/cli",
        "cores used",
        "captions/s per core",
        "sent",
        "recv",
        "5xx",
    ):
        table.add_column(col, justify="right")
    for row in result["load"]:
        per_core = row.get("captions_per_s_per_core")
        table.add_row(
            *([str(row.get("round", 1))] if rounds else []),
            str(row.get("gateways", 1)),
            str(row.get("api_processes", 1)),
            str(row["clients"]),
            f"{row['captions_per_s']:.1f}",
            str(row["p50_ms"]),
            str(row["p99_ms"]),
            f"{row['mean_rows_per_call']:.1f}",
            _cpu_cells(row)[1],
            f"{row['server_cores_used']:.2f}" if "server_cores_used" in row else "-",
            f"{per_core:.0f}" if per_core else "-",
            str(row["sent"]),
            str(row["received"]),
            str(row["errors_5xx"]),
        )
    naive_http = result["naive"].get("gateway")
    table.caption = (
        f"{result['limit']['skipped']}; single decode {result['single_decode_ms']:.2f} ms in process "
        f"({result['rows_per_caption']:.0f} step rows, {result['steps_per_caption']:.0f} step calls per "
        f"caption); naive {result['naive']['captions_per_s']:.1f} captions/s in process"
        + (
            f", {naive_http['captions_per_s']:.1f} over HTTP at {naive_http['clients']} clients"
            if naive_http
            else ""
        )
        + (
            "; HTTP floor (loadtests.peers.http_floor: HTTP and PNG decoding only) at "
            f"{floor['clients']} clients: "
            f"{floor['captions_per_s']:.1f} requests/s, {floor['cpu_ms_per_caption'].get('server', 0):.2f} "
            "server CPU ms per request"
            if (floor := result.get("floor"))
            else ""
        )
        + "; CPU ms srv(loop) = the gateways' CPU per caption (of it, their event-loop threads'), cli = the "
        "load generator's; cores used = the gateways' CPU seconds per second; captions/s per core = "
        "captions/s / cores used"
    )
    return table


def _cpu_cells(row: dict[str, Any]) -> list[str]:
    """'any server / HTTP floor' CPU bounds as % of the limit, and the server's / client's CPU ms per
    caption ('-' where not measured)."""
    bounds, cpu = row.get("cpu_bounds_of_limit") or {}, row.get("cpu_ms_per_caption") or {}
    shares = "/".join(f"{100 * bounds[k]:.0f}" if k in bounds else "-" for k in ("any_server", "http_floor"))
    ms = "/".join(f"{cpu[k]:.1f}" if k in cpu else "-" for k in ("server", "client"))
    if "server_main_thread" in cpu:
        ms = ms.replace("/", f"({cpu['server_main_thread']:.1f})/", 1)
    return [f"{shares}%", ms]


def _step_cell(row: dict[str, Any]) -> str:
    """'load/own/best' wall ms of the step call at this level's rows per call: under load, alone with the
    gateway's threads per call, alone with the fastest ('-' where not measured)."""
    if not row.get("step_slowdown"):
        return "-"
    own = f"{row['step_ms_alone_own']:.1f}" if "step_ms_alone_own" in row else "-"
    return f"{row['step_ms_under_load']:.1f}/{own}/{row['step_ms_alone']:.1f}"


def _peer_cells(row: dict[str, Any], peer: dict[str, Any] | None) -> list[str]:
    """The per-request peer's captions/s, the gateway's multiple of it, and its p50 at ``row``'s clients."""
    if peer is None or not peer["captions_per_s"]:
        return ["-", "-", "-"]
    return [
        f"{peer['captions_per_s']:.1f}",
        f"{row['captions_per_s'] / peer['captions_per_s']:.1f}",
        str(peer["p50_ms"]),
    ]


__all__ = ["null_summary", "summary"]
