"""What a text file's bytes say about its encoding: a byte-order mark, the null-byte pattern of
UTF-16/UTF-32 text without one, or null bytes that no text encoding the readers take explains.

A UTF-16 file read as UTF-8 decodes without error when its text is ASCII: every other byte is a
null, the header becomes a row of nulls and the reader reports "missing column(s)". Every reader
asks `sniff` first, so that such a file is decoded as what it is, or refused naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

# Longest first: the UTF-32-LE mark starts with the UTF-16-LE one.
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32", "UTF-32-LE"),
    (b"\x00\x00\xfe\xff", "utf-32", "UTF-32-BE"),
    (b"\xff\xfe", "utf-16", "UTF-16-LE"),
    (b"\xfe\xff", "utf-16", "UTF-16-BE"),
)
_SAMPLE = 4096  # bytes of the head whose null pattern is looked at


class Sniffed(NamedTuple):
    """A wide encoding found in a file's head."""

    codec: str  # what Python decodes it with (with a BOM: the codec that drops it)
    label: str  # for messages and records: `UTF-16-LE (byte-order mark FF FE)`
    name: str  # the record's encoding name: utf-16-le, utf-32-be, ...


def sniff(head: bytes) -> Sniffed | None:
    """UTF-16/UTF-32 (LE/BE) by byte-order mark, else by the null bytes of ASCII text in it."""
    for bom, codec, label in _BOMS:
        if head.startswith(bom):
            mark = f"{label} (byte-order mark {bom.hex(' ').upper()})"
            return Sniffed(codec, mark, label.lower())
    n = min(len(head), _SAMPLE) // 4 * 4
    if n < 4 or b"\x00" not in head[:n]:
        return None
    zero = [head[k:n:4].count(0) / (n // 4) for k in range(4)]  # share of nulls at offset k mod 4
    for label, nulls, text in (
        ("UTF-32-LE", (1, 2, 3), (0,)),
        ("UTF-32-BE", (0, 1, 2), (3,)),
        ("UTF-16-LE", (1, 3), (0, 2)),
        ("UTF-16-BE", (0, 2), (1, 3)),
    ):
        if min(zero[k] for k in nulls) >= 0.9 and max(zero[k] for k in text) <= 0.1:
            return Sniffed(label.lower(), f"{label} (no byte-order mark)", label.lower())
    return None


def decode_wide(path: Path, data: bytes, found: Sniffed) -> str:
    """`data` decoded as the sniffed encoding, or an error naming it and the line it fails on."""
    try:
        return data.decode(found.codec)
    except UnicodeDecodeError as e:
        good = e.object[: e.start - e.start % 2].decode(found.codec, errors="replace")
        line = line_at(good, len(good))
        raise ValueError(
            f"{path} line {line}: the file reads as {found.label}, but bytes "
            f"{e.object[e.start : e.end]!r} at byte {e.start} are not valid {found.name} "
            f"({e.reason}; a file cut short?)"
        ) from None


def line_at(data: bytes | str, at: int) -> int:
    """The 1-based line of offset `at`, numbered as an editor does (`\\n`, `\\r\\n`, `\\r`)."""
    nl, cr = ("\n", "\r") if isinstance(data, str) else (b"\n", b"\r")
    head = data[:at]
    return head.count(nl) + head.count(cr) - head.count(cr + nl) + 1


def null_error(path: Path, data: bytes, at: int, encoding: str) -> ValueError:
    """A null byte at offset `at` of a file that reads as `encoding`: damaged, or not text."""
    line = line_at(data, at)
    return ValueError(
        f"{path} line {line}: null byte (0x00) at byte {at} of a file that reads as {encoding}: "
        "text files hold none (a damaged or partly zero-filled download, a binary file, or "
        "UTF-16/UTF-32 text without a byte-order mark)"
    )


def wide_error(path: Path, found: Sniffed) -> ValueError:
    """For readers of UTF-8 only: the file is UTF-16/32, say so and how to convert it."""
    src = found.codec.upper().replace("-LE", "LE").replace("-BE", "BE")  # iconv's names
    return ValueError(
        f"{path} line 1: the file is {found.label} text, but these readers read UTF-8; "
        f"convert it, e.g. `iconv -f {src} -t UTF-8 {path.name} > {path.stem}.utf8{path.suffix}`"
    )
