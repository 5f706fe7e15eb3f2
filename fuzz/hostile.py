"""Structured hostile inputs: shapes a byte mutator reaches only by luck.

A coverage-guided fuzzer flips bytes; it does not write a pickle whose list holds itself, a YAML
anchor graph that doubles at each level, 100,000 nested brackets or a gzip that expands a
thousand times. :func:`expand` turns a short fuzzer input that starts with :data:`MARK` into one
of those shapes, sized by the input's next bytes and wrapped in an envelope that a format's
reader gets past (``{"entries": ..., "pg_config": {}}`` reaches the flight recorder's walk,
``{"traceEvents": ...}`` the trace reader's), so the fuzzer explores the parameters of each
shape around the readers' bounds (``hpcscope.model.bounds``). Every other input is left as it
is. The seed corpora hold one input per shape (``fuzz/seed.py``), and the acceptance test of the
bounds (``tests/test_hostile_inputs.py``) feeds the full-size shapes of :func:`full_size` to
every reader of outside input.

Shapes: ``pickle_cycle``, ``pickle_shared`` (references doubling at each level),
``pickle_deep``, ``json_deep``, ``json_wide`` (huge counts), ``yaml_cycle`` (a self-referencing
anchor), ``yaml_laughs`` (aliases doubling), ``yaml_deep``, ``gzip_bomb``, ``tar_many``
(members by the thousand), ``tar_gzip_bomb`` (a bomb inside an archive).
"""

from __future__ import annotations

import functools
import gzip
import io
import struct
import tarfile
import zlib
from collections.abc import Callable

#: The first bytes of a fuzzer input that :func:`expand` turns into a hostile shape.
MARK = b"\xfeHOSTILE"

_PROTO = b"\x80\x04"


def pickle_cycle(size: int) -> bytes:
    """A dump-like dict whose ``entries`` list holds the dict itself (37 bytes at size 0):
    ``{"entries": [<the dict>, 1, 1, ...], "pg_config": {}}``."""
    entries = b"\x8c\x07entries\x94]\x94(h\x00" + b"K\x01" * size + b"e"
    return _PROTO + b"}\x94(" + entries + b"\x8c\tpg_config\x94}\x94u."


def pickle_shared(levels: int) -> bytes:
    """A list holding the previous level twice, ``levels`` times: 2**levels values walked."""
    out = bytearray(_PROTO + b"]\x94K\x01a")  # memo 0: [1]
    for level in range(levels):
        out += b"]\x94" + b"h" + bytes([level]) + b"h" + bytes([level]) + b"\x86a"
        if level >= 254:
            break
    return bytes(out + b".")


def pickle_deep(depth: int) -> bytes:
    """``depth`` nested empty lists (built iteratively by the unpickler)."""
    return _PROTO + b"]" * depth + b"a" * (depth - 1) + b"."


def json_deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def json_wide(count: int) -> bytes:
    """An array of ``count`` zeros: as many values as a megabyte holds."""
    return b"[" + b",".join([b"0"] * max(count, 1)) + b"]"


def yaml_cycle(variant: int) -> bytes:
    return [b"a: &a [*a]\n", b"&a {b: *a}\n", b"x: &x\n  y: *x\n", b"- &l\n  - *l\n"][variant % 4]


def yaml_laughs(levels: int) -> bytes:
    lines = [b"l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        alias = b"*l%d" % (i - 1)
        lines.append(b"l%d: &l%d [" % (i, i) + b", ".join([alias] * 9) + b"]")
    return b"\n".join(lines) + b"\n"


def yaml_deep(depth: int) -> bytes:
    return b"x: " + b"[" * depth + b"]" * depth + b"\n"


@functools.cache
def gzip_bomb(compressed_bytes: int) -> bytes:
    """A valid gzip of zeros of about ``compressed_bytes`` that expands ~1,000 times: one
    deflate block of a MiB of zeros, flushed so that every repetition is the same bytes, repeated
    (cheap to build at any size)."""
    chunk = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    repeats = max(1, (compressed_bytes - len(first)) // max(1, len(block)))
    tail = deflate.flush()
    crc = zlib.crc32(chunk)
    for _ in range(repeats):
        crc = zlib.crc32(chunk, crc)
    size = (repeats + 1) << 20
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)
    return header + first + block * repeats + tail + trailer


def tar_many(members: int) -> bytes:
    """A tar of ``members`` empty ``.json`` files."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(members):
            tar.addfile(tarfile.TarInfo(f"rank-{i}.json"), io.BytesIO(b""))
    return out.getvalue()


def tar_gzip_bomb(compressed_bytes: int) -> bytes:
    """A tar.gz whose one member is itself a gzip bomb."""
    bomb = gzip_bomb(compressed_bytes)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("rank-0.json.gz")
        info.size = len(bomb)
        tar.addfile(info, io.BytesIO(bomb))
    return out.getvalue()


#: Each shape and how the fuzzer's 16-bit parameter sizes it: past every reader's bound, and
#: small enough that an input costs milliseconds (at most ~64 KiB of text; a bomb's bytes are
#: what it expands to). The full-size shapes are :func:`full_size`'s.
SHAPES: dict[str, Callable[[int], bytes]] = {
    "pickle_cycle": lambda p: pickle_cycle(p % 64),
    "pickle_shared": lambda p: pickle_shared(8 + p % 56),
    "pickle_deep": lambda p: pickle_deep(100 + p % 8192),
    "json_deep": lambda p: json_deep(100 + p % 8192),
    "json_wide": lambda p: json_wide(p % 32768),
    "yaml_cycle": yaml_cycle,
    "yaml_laughs": lambda p: yaml_laughs(3 + p % 12),
    "yaml_deep": lambda p: yaml_deep(50 + p % 1024),
    "gzip_bomb": lambda p: gzip_bomb(4096 + (p % 64) * 1024),
    "tar_many": lambda p: tar_many(p % 8192),
    "tar_gzip_bomb": lambda p: tar_gzip_bomb(4096 + (p % 64) * 1024),
}
_NAMES = sorted(SHAPES)

#: Envelopes that get a shape past a format's first check (``%s``: the shape).
_ENVELOPES: tuple[Callable[[bytes], bytes], ...] = (
    lambda shape: shape,
    lambda shape: b'{"entries": ' + shape + b', "pg_config": {}}',
    lambda shape: b'{"traceEvents": ' + shape + b"}",
    lambda shape: b'{"jobs": ' + shape + b', "meta": {}}',
    lambda shape: b"nodes: " + shape.replace(b"\n", b"\n  ") + b"\n",
)


def expand(data: bytes) -> bytes:
    """The hostile shape a marked input names (module docstring); any other input as is.

    After :data:`MARK`: one byte picks the shape, two the size parameter, one the envelope
    (JSON and YAML shapes only)."""
    if not data.startswith(MARK) or len(data) < len(MARK) + 3:
        return data
    head = data[len(MARK) :]
    name = _NAMES[head[0] % len(_NAMES)]
    shape = SHAPES[name](int.from_bytes(head[1:3], "big"))
    if name.startswith(("json", "yaml")) and len(head) > 3:
        shape = _ENVELOPES[head[3] % len(_ENVELOPES)](shape)
    return shape


def marked(name: str, parameter: int = 0, envelope: int = 0) -> bytes:
    """The fuzzer input that :func:`expand` turns into ``name`` (a seed of the corpora)."""
    return MARK + bytes([_NAMES.index(name)]) + parameter.to_bytes(2, "big") + bytes([envelope])


def full_size() -> dict[str, bytes]:
    """The acceptance shapes: a self-referencing pickle, a self-referencing YAML anchor graph,
    a 2 MB gzip expanding ~1,000 times (past every reader's limit) and a 100,000-deep nesting
    (as JSON brackets, which YAML reads as flow sequences)."""
    return {
        "self_referencing_pickle": pickle_cycle(0),
        "self_referencing_yaml": yaml_cycle(0),
        "gzip_bomb_2mb": gzip_bomb(2 << 20),
        "nesting_100000": json_deep(100_000),
    }


def gunzipped_size(data: bytes, *, limit: int) -> int:
    """Bytes ``data`` expands to, counted up to ``limit`` (a test of the generator)."""
    stream = gzip.GzipFile(fileobj=io.BytesIO(data))
    total = 0
    while total < limit:
        piece = stream.read(1 << 20)
        if not piece:
            break
        total += len(piece)
    return total
