"""The pure parts of the Triton backend's address pool (``pool.py`` does the I/O).

- ``parse_target``: ``COMPCAP_TRITON_URL`` as one ``host:port``, a comma-separated list of them, or
  ``dns:///name:port`` (every address the name resolves to).
- ``AddressSet``: the known addresses and their state. A new address is ``pending`` (no traffic, probed
  with the back-off below) until a probe finds its server and models ready and its models the
  manifest's (``healthy``) or not (``mismatched``). A call that fails because the address went away
  ejects it (``ejected``) for a back-off that doubles with each failed probe (``backoff_s``); a mismatched
  one is checked again after the longest back-off. ``pick`` returns the healthy address with the
  fewest calls in flight, ties taken in turn; with no healthy address it falls back to the ejected ones
  (Envoy's "panic" routing): they fail fast while their servers are down, and the first that answers
  again serves at once instead of after its back-off.
- ``ModelIdentity`` and ``identity_problems``: what makes a served model the manifest's — its version
  (the repository's version directory), ``max_batch_size``, tensors (names, datatypes, dims) and, when
  the server publishes it, the SHA-256 of the ONNX file in the config parameter ``compcap_model_sha256``.

No tritonclient import: the settings validate the URL with ``parse_target``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from service.manifest import Manifest, ModelEntry

EJECT_BASE_S = 1.0  # first back-off of an ejected address; doubled by each failed probe
EJECT_MAX_S = 16.0  # longest back-off, and how often a mismatched address is checked again
DIGEST_PARAMETER = "compcap_model_sha256"  # config.pbtxt parameter: sha256 of the model's ONNX file

# gRPC statuses of a call whose address went away or stalled: eject it, retry the call elsewhere
_ADDRESS_FAILURES = frozenset(
    {"StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED", "StatusCode.CANCELLED"}
)


def is_address_failure(status: str) -> bool:
    """Whether a call that failed with the gRPC ``status`` (``str(exc.status())``) says its address is
    gone (connection refused or reset, server stopping, no answer in time) rather than the request bad."""
    return status in _ADDRESS_FAILURES


def backoff_s(failures: int, base_s: float = EJECT_BASE_S, max_s: float = EJECT_MAX_S) -> float:
    """The back-off after ``failures`` consecutive failures (1 → ``base_s``, doubling up to ``max_s``)."""
    return float(min(max_s, base_s * 2 ** max(failures - 1, 0)))


class State(StrEnum):
    PENDING = "pending"
    HEALTHY = "healthy"
    EJECTED = "ejected"
    MISMATCHED = "mismatched"


@dataclass(eq=False)
class Address:
    url: str
    state: State = State.PENDING
    outstanding: int = 0  # calls in flight
    failures: int = 0  # consecutive failures since it was last admitted
    retry_at: float = 0.0  # when an ejected or mismatched address is probed again
    reason: str = ""  # why it is not healthy
    admissions: int = 0  # times it became healthy


class AddressSet:
    """The addresses of one target and their states (module docstring). ``clock`` is injectable."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        base_s: float = EJECT_BASE_S,
        max_s: float = EJECT_MAX_S,
    ) -> None:
        self.clock = clock
        self.base_s = base_s
        self.max_s = max_s
        self._by_url: dict[str, Address] = {}
        self._turn = 0

    def __iter__(self) -> Iterator[Address]:
        return iter(list(self._by_url.values()))

    def __len__(self) -> int:
        return len(self._by_url)

    def get(self, url: str) -> Address | None:
        return self._by_url.get(url)

    def update(self, urls: Iterable[str]) -> tuple[list[Address], list[Address]]:
        """Make ``urls`` the address set; returns (joined, left). Known addresses keep their state."""
        wanted = list(dict.fromkeys(urls))
        left = [a for url, a in self._by_url.items() if url not in wanted]
        joined = [Address(url) for url in wanted if url not in self._by_url]
        for address in left:
            del self._by_url[address.url]
        for address in joined:
            self._by_url[address.url] = address
        return joined, left

    def pick(self, exclude: Collection[str] = ()) -> Address | None:
        """The healthy address (not in ``exclude``) with the fewest calls in flight, ties in turn; with
        none healthy, an ejected one the same way; ``None`` when there is neither."""
        candidates = [a for a in self._by_url.values() if a.state is State.HEALTHY and a.url not in exclude]
        if not candidates:
            candidates = [
                a for a in self._by_url.values() if a.state is State.EJECTED and a.url not in exclude
            ]
        if not candidates:
            return None
        least = min(a.outstanding for a in candidates)
        tied = [a for a in candidates if a.outstanding == least]
        self._turn += 1
        return tied[self._turn % len(tied)]

    def admit(self, address: Address) -> None:
        address.state = State.HEALTHY
        address.failures = 0
        address.reason = ""
        address.admissions += 1

    def fail_call(self, address: Address, reason: str) -> bool:
        """A call on ``address`` failed because the address went away: eject it if it was healthy (True).
        Calls failing on an address already ejected change nothing (no back-off escalation)."""
        if address.state is not State.HEALTHY:
            return False
        self._eject(address, reason, backoff_s(1, self.base_s, self.max_s))
        return True

    def fail_probe(self, address: Address, reason: str, retry_s: float | None = None) -> None:
        """A probe failed: probed again after the back-off, doubled by each failed probe; or, with
        ``retry_s`` (start-up polling), ``retry_s`` from now with no escalation. An address never
        admitted stays pending (no call, even when none is healthy); one admitted before is ejected."""
        if retry_s is None:
            address.failures += 1
        wait = backoff_s(address.failures, self.base_s, self.max_s) if retry_s is None else retry_s
        self._eject(address, reason, wait)
        if address.admissions == 0:
            address.state = State.PENDING

    def _eject(self, address: Address, reason: str, wait_s: float) -> None:
        address.state = State.EJECTED
        address.failures = max(address.failures, 1)
        address.reason = reason
        address.retry_at = self.clock() + wait_s

    def mismatch(self, address: Address, reason: str) -> None:
        """Its models are not the manifest's: no traffic, checked again after the longest back-off."""
        address.state = State.MISMATCHED
        address.reason = reason
        address.retry_at = self.clock() + self.max_s

    def succeed_call(self, address: Address) -> bool:
        """A call on an ejected address (panic routing) succeeded: probe it now (True) to admit it."""
        if address.state is not State.EJECTED:
            return False
        address.retry_at = min(address.retry_at, self.clock())
        return True

    def due(self) -> list[Address]:
        """Addresses to probe now: those not healthy whose ``retry_at`` has come (a new one at once)."""
        now = self.clock()
        return [a for a in self._by_url.values() if a.state is not State.HEALTHY and a.retry_at <= now]

    def next_due(self) -> float | None:
        """The earliest ``retry_at`` of the addresses waiting for a probe (``None``: none waits)."""
        return min((a.retry_at for a in self._by_url.values() if a.state is not State.HEALTHY), default=None)

    def healthy(self) -> list[Address]:
        return [a for a in self._by_url.values() if a.state is State.HEALTHY]

    def counts(self) -> dict[str, int]:
        counts = {state.value: 0 for state in State}
        for address in self._by_url.values():
            counts[address.state.value] += 1
        return counts

    def summary(self) -> str:
        """One line: every address with its state and reason."""
        if not self._by_url:
            return "no address"
        return "; ".join(
            f"{a.url} {a.state.value}" + (f" ({a.reason})" if a.reason else "") for a in self._by_url.values()
        )


@dataclass(frozen=True)
class ModelIdentity:
    """What a model must be for its calls to mix with the manifest's: the version that serves it, its
    ``max_batch_size``, its tensors ``(name, datatype, dims)`` with the batch dim, its ONNX file's sha256
    (``None``: not known on this side)."""

    version: str
    max_batch_size: int
    tensors: frozenset[tuple[str, str, tuple[int, ...]]]
    digest: str | None = None


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def expected_identity(entry: ModelEntry, repo: Path | None = None) -> ModelIdentity:
    """The identity the manifest gives ``entry``; with ``repo``, its version directory and the sha256 of
    its ONNX file when the file is there (the gateway's image holds the files Triton serves)."""
    batch = (-1,) if entry.max_batch_size > 0 else ()
    tensors = frozenset((t.name, t.dtype, (*batch, *t.dims)) for t in [*entry.inputs, *entry.outputs])
    path = entry.path(repo if repo is not None else Path())
    digest = file_sha256(path) if repo is not None and path.is_file() else None
    return ModelIdentity(path.parent.name, entry.max_batch_size, tensors, digest)


def expected_identities(manifest: Manifest, repo: Path | None = None) -> dict[str, ModelIdentity]:
    return {entry.name: expected_identity(entry, repo) for entry in manifest.models}


def latest_version(versions: Iterable[str]) -> str:
    """The version Triton runs when a call names none: the highest (``''`` for none)."""
    numbers = [v for v in versions if v.isdigit()]
    return max(numbers, key=int, default="")


def identity_problems(expected: ModelIdentity, served: ModelIdentity) -> list[str]:
    """Why ``served`` is not ``expected`` (empty: it is). The digest is compared when both sides know it."""
    problems = []
    if served.version != expected.version:
        problems.append(f"version {served.version or 'none'} served, {expected.version} expected")
    if served.max_batch_size != expected.max_batch_size:
        problems.append(
            f"max_batch_size {served.max_batch_size}, the manifest says {expected.max_batch_size}"
        )
    if served.tensors != expected.tensors:
        extra, missing = sorted(served.tensors - expected.tensors), sorted(expected.tensors - served.tensors)
        problems.append(f"tensors differ: served {extra}, the manifest says {missing}")
    if expected.digest and served.digest and served.digest != expected.digest:
        problems.append(
            f"{DIGEST_PARAMETER} {served.digest[:12]}…, "
            f"the repository's model.onnx is {expected.digest[:12]}…"
        )
    return problems
