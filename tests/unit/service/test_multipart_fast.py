"""The one-pass multipart reader gives exactly what Starlette's streaming parser gives for a plain
form, and leaves everything else to it (``None``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest
from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from service.api.multipart import SPOOL_MAX, plain_form

BOUNDARY = "----compcapBoundary7MA4YWxk"


def part(name: str, data: bytes, filename: str | None = None, extra: str = "") -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
    head = f"Content-Disposition: {disposition}\r\n{extra}"
    if filename is not None:
        head += "Content-Type: image/png\r\n"
    return f"--{BOUNDARY}\r\n{head}\r\n".encode() + data + b"\r\n"


def form(*parts: bytes, end: bytes = b"\r\n") -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--".encode() + end


async def streamed(body: bytes, content_type: str) -> list[tuple[str, UploadFile | str]]:
    async def chunks() -> AsyncGenerator[bytes, None]:
        for at in range(0, len(body), 1000):  # as a socket delivers it
            yield body[at : at + 1000]

    parser = MultiPartParser(Headers({"content-type": content_type}), chunks(), max_files=8, max_fields=20)
    return (await parser.parse()).multi_items()


async def values(items: list[tuple[str, UploadFile | str]]) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for name, value in items:
        if isinstance(value, UploadFile):
            out.append(
                (name, (value.filename, value.size, await value.read(), value.headers.get("content-type")))
            )
        else:
            out.append((name, value))
    return out


PNG = bytes(range(256)) * 70  # binary, with CR and LF bytes inside
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"
PLAIN = {
    "one image": form(part("image", PNG, "a.png")),
    "images and fields": form(
        part("image", PNG, "a.png"),
        part("beam_size", b"3"),
        part("image", PNG[::-1], "b.png"),
        part("hooks", b"[]"),
    ),
    "no epilogue": form(part("image", PNG, "a.png"), end=b""),
    "unicode field and filename": form(
        part("image", PNG, "\u00e9t\u00e9 1.png"), part("model", "b\u00fctr".encode())
    ),
    "latin-1 field": form(part("image", PNG, "a.png"), part("note", "caf\u00e9".encode("latin-1"))),
    "empty field and file": form(part("model", b""), part("image", b"", "empty.png")),
    "extra part header": form(part("image", PNG, "a.png", extra="X-Trace: 1\r\n")),
}


@pytest.mark.parametrize("body", PLAIN.values(), ids=PLAIN.keys())
@pytest.mark.parametrize("content_type", [CONTENT_TYPE, f'Multipart/Form-Data; boundary="{BOUNDARY}"'])
def test_a_plain_form_reads_as_the_streaming_parser_reads_it(body: bytes, content_type: str) -> None:
    fast = plain_form(body, content_type, max_files=8, max_fields=20, max_field_bytes=1 << 20)
    assert fast is not None
    assert asyncio.run(values(fast)) == asyncio.run(values(asyncio.run(streamed(body, content_type))))


ODD = {
    "preamble": b"some preamble\r\n" + form(part("image", PNG, "a.png")),
    "charset": form(part("image", PNG, "a.png")),
    "no name": form(part("image", PNG, "a.png")).replace(b'name="image"; ', b""),
    "no disposition": form(part("image", PNG, "a.png")).replace(b"Content-Disposition", b"X-Disposition"),
    "not form-data": form(part("image", PNG, "a.png")).replace(b"form-data;", b"attachment;"),
    "header without colon": form(part("image", PNG, "a.png", extra="broken header\r\n")),
    "unterminated": form(part("image", PNG, "a.png"))[:-10],
    "trailing junk": form(part("image", PNG, "a.png"), end=b"\r\njunk"),
    "too many files": form(*(part("image", PNG, f"{i}.png") for i in range(9))),
    "too many fields": form(*(part(f"f{i}", b"x") for i in range(21))),
    "field over its bound": form(part("image", PNG, "a.png"), part("hooks", b"x" * 2000)),
    "file past the spool": form(part("image", b"x" * (SPOOL_MAX + 1), "big.png")),
}


@pytest.mark.parametrize("name", ODD.keys())
def test_anything_else_is_left_to_the_streaming_parser(name: str) -> None:
    content_type = CONTENT_TYPE + ("; charset=latin-1" if name == "charset" else "")
    assert plain_form(ODD[name], content_type, max_files=8, max_fields=20, max_field_bytes=1000) is None


def test_what_it_leaves_the_streaming_parser_may_refuse() -> None:
    """The errors stay the streaming parser's: e.g. a part without a name."""
    with pytest.raises(MultiPartException, match="name"):
        asyncio.run(streamed(ODD["no name"], CONTENT_TYPE))
