"""The settings A/B's variant parsing: environment values must be strings, names non-empty."""

import pytest

from loadtests.load.ab_settings import parse_variants


def test_variants_parse_to_environment() -> None:
    got = parse_variants('{"base": {}, "t1": {"COMPCAP_INTRA_OP_THREADS": "1"}}')
    assert got == {"base": {}, "t1": {"COMPCAP_INTRA_OP_THREADS": "1"}}


@pytest.mark.parametrize("text", ["{}", "[]", '{"a": {"X": 1}}', '{"a": "X=1"}'])
def test_bad_variants_are_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="variants"):
        parse_variants(text)
