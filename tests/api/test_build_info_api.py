"""``compcap_build_info{version, model_repo_digest} 1``: the package version and the first 12 hex
characters of the sha256 of the served repository's manifest.json bytes (the dashboard's "Versions
serving" panel and the ``CompcapMixedVersions`` alert read it). On a served gateway's /metrics:
tests/api/test_captions_api.py (its app, not one more)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from service.metrics import BUILD_INFO, Metrics


def build_info_samples(exposition: str) -> list[dict[str, str]]:
    return [
        {**sample.labels, "value": str(sample.value)}
        for family in text_string_to_metric_families(exposition)
        if family.name == BUILD_INFO
        for sample in family.samples
    ]


def test_the_digest_is_stable_and_follows_the_manifest_bytes(tmp_path: Path) -> None:
    digests = []
    for name, body in (("a", b'{"format_version": 1}'), ("b", b'{"format_version": 1}'), ("c", b"{}")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_bytes(body)
        metrics = Metrics()
        metrics.set_build_info(tmp_path / name)
        [sample] = build_info_samples(metrics.exposition().decode())
        digests.append(sample["model_repo_digest"])
    assert digests[0] == digests[1] == hashlib.sha256(b'{"format_version": 1}').hexdigest()[:12]
    assert digests[2] != digests[0] and len(digests[2]) == 12
