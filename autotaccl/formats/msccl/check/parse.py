"""A strict reader for MSCCL XML that follows the runtimes' own tokenizer (§1.1).

Anything the runtimes would refuse to parse (an XML declaration, TABs, attributes over several lines,
single quotes, integers with a leading zero that ``strtol(.., 0)`` reads as octal, a missing step
attribute, an unknown step type or buffer) raises :class:`~autotaccl.errors.InputError` naming the
line. Unknown elements (e.g. TACCL's ``<copy>``) are skipped with a note, as the runtimes do.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ....errors import InputError
from ..program import BUFFERS, GPU_ATTRS, STEP_ATTRS, STEP_TYPES, TB_ATTRS, Gpu, Program, Step, ThreadBlock

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]*")
_INT = re.compile(r"-?(0|[1-9][0-9]*)")
MAX_ATTRS, MAX_CHARS = 16, 255     # the runtime tokenizer's limits (§1.1)
MAX_CHUNKS = 1 << 20               # per buffer and per loop: far above any real algorithm
_ENTITIES = {"&quot;": '"', "&apos;": "'", "&lt;": "<", "&gt;": ">", "&amp;": "&"}


@dataclass
class _Element:
    name: str
    attrs: dict[str, str]
    line: int
    children: list["_Element"] = field(default_factory=list)


def _unescape(value: str) -> str:
    return re.sub(r"&(quot|apos|lt|gt|amp);", lambda m: _ENTITIES[m.group(0)], value)


def _tokenize(text: str, source: str) -> _Element:
    """The element tree of ``text``; the first element must be the root and nothing may follow it."""
    pos, line, n = 0, 1, len(text)
    stack: list[_Element] = []
    root: _Element | None = None

    def fail(expected: str, at: int | None = None) -> InputError:
        return InputError(source, f"line {line if at is None else at}", expected)

    while pos < n:
        ch = text[pos]
        if ch == "\n":
            line += 1
            pos += 1
            continue
        if ch in " \r":
            pos += 1
            continue
        if ch == "\t":
            raise fail("no TAB characters (the runtime's parser skips only spaces and newlines)")
        if ch != "<":
            raise fail(f"an element, not text {text[pos:pos + 20].splitlines()[0]!r}")
        if text.startswith("<!--", pos):
            end = text.find("-->", pos + 4)
            if end < 0:
                raise fail("a comment closed by -->")
            line += text.count("\n", pos, end)
            pos = end + 3
            continue
        if text.startswith("<?", pos):
            raise fail("no XML declaration <?...?> (the runtime's tokenizer rejects it)")
        if root is not None and not stack:
            raise fail("nothing after the closing </algo>")
        end = text.find(">", pos)
        if end < 0:
            raise fail("a tag closed by >")
        tag = text[pos + 1:end]
        if "\n" in tag or "\r" in tag:
            raise fail("all attributes of an element on one line (the runtime's parser fails otherwise)")
        if "\t" in tag:
            raise fail("no TAB characters (the runtime's parser skips only spaces and newlines)")
        pos = end + 1
        if tag.startswith("/"):
            name = tag[1:].strip(" ")
            if not stack or stack[-1].name != name:
                raise fail(f"</{stack[-1].name}>" if stack else "no closing tag without an opening one")
            stack.pop()
            continue
        closed = tag.endswith("/")
        body = tag[:-1] if closed else tag
        m = _NAME.match(body)
        if not m:
            raise fail("an element name after <")
        elem = _Element(m.group(0), {}, line)
        rest = body[m.end():]
        while rest.strip(" "):
            am = re.match(r" +([A-Za-z_][A-Za-z0-9_.:-]*)=(\"[^\"]*\"|'[^']*')", rest)
            if not am:
                raise fail(f'attributes written name="value" in <{elem.name}>, not {rest.strip()[:30]!r}')
            key, raw = am.group(1), am.group(2)
            if raw.startswith("'"):
                raise fail(f"double quotes around the value of {key} (the runtime's parser needs them)")
            if key in elem.attrs:
                raise fail(f"attribute {key} only once in <{elem.name}>")
            if max(len(key), len(raw) - 2) > MAX_CHARS:
                raise fail(f"names and values of at most {MAX_CHARS} characters ({key} has {len(raw) - 2}; the "
                           "runtime's parser truncates them)")
            elem.attrs[key] = _unescape(raw[1:-1])
            rest = rest[am.end():]
        if len(elem.attrs) > MAX_ATTRS:
            raise fail(f"at most {MAX_ATTRS} attributes per element (<{elem.name}> has {len(elem.attrs)}; the "
                       "runtime silently drops the rest)")
        if stack:
            stack[-1].children.append(elem)
        elif root is None:
            root = elem
        if not closed:
            stack.append(elem)
    if root is None:
        raise fail("an <algo> element (the file holds none)")
    if stack:
        raise fail(f"</{stack[-1].name}> before the end of the file")
    return root


def _int(elem: _Element, key: str, source: str) -> int:
    if key not in elem.attrs:
        raise InputError(source, f"line {elem.line}", f"<{elem.name}> with attribute {key} (the runtime requires it)")
    value = elem.attrs[key]
    if not _INT.fullmatch(value):
        if re.fullmatch(r"-?0[0-9]+", value):
            raise InputError(source, f"line {elem.line}",
                             f"{key}={value!r} without a leading zero (the runtime reads it as octal)")
        raise InputError(source, f"line {elem.line}", f"{key} as a plain decimal integer, not {value!r}")
    return int(value)


def _at_most(elem: _Element, key: str, source: str) -> None:
    """Chunk counts are bounded: the checker keeps state per chunk (a huge count is refused, not swapped)."""
    if key in elem.attrs and int(elem.attrs[key]) > MAX_CHUNKS:
        raise InputError(source, f"line {elem.line}", f"{key} at most {MAX_CHUNKS}, not {elem.attrs[key]}")


def _str(elem: _Element, key: str, source: str, choices=None) -> str:
    if key not in elem.attrs:
        raise InputError(source, f"line {elem.line}", f"<{elem.name}> with attribute {key} (the runtime requires it)")
    value = elem.attrs[key]
    if choices is not None and value not in choices:
        raise InputError(source, f"line {elem.line}", f"{key} one of {', '.join(choices)}, not {value!r}")
    return value


def parse_xml(text: str, source: str = "<xml>") -> Program:
    """Parse MSCCL XML text into a :class:`Program` (attributes of ``<algo>`` are kept as strings)."""
    root = _tokenize(text, source)
    if root.name != "algo":
        raise InputError(source, f"line {root.line}", f"<algo> as the root element, not <{root.name}>")
    notes = []
    for key in ("nchannels", "nchunksperloop", "ngpus", "inplace", "outofplace", "minBytes", "maxBytes"):
        if key in root.attrs:
            _int(root, key, source)
    for key in ("ngpus", "nchunksperloop", "coll", "proto"):
        _str(root, key, source)
    _at_most(root, "nchunksperloop", source)
    gpus = []
    for g in root.children:
        if g.name != "gpu":
            notes.append(f"line {g.line}: <{g.name}> skipped (unknown element)")
            continue
        tbs = []
        for t in g.children:
            if t.name != "tb":
                notes.append(f"line {t.line}: <{t.name}> skipped (unknown element)")
                continue
            steps = []
            for s in t.children:
                if s.name != "step":
                    notes.append(f"line {s.line}: <{s.name}> skipped (unknown element)")
                    continue
                missing = [k for k in STEP_ATTRS if k not in s.attrs]
                if missing:
                    raise InputError(source, f"line {s.line}",
                                     f"<step> with attribute {missing[0]} (both runtimes require every step attribute)")
                steps.append(Step(
                    _int(s, "s", source), _str(s, "type", source, STEP_TYPES), _str(s, "srcbuf", source, BUFFERS),
                    _int(s, "srcoff", source), _str(s, "dstbuf", source, BUFFERS), _int(s, "dstoff", source),
                    _int(s, "cnt", source), _int(s, "depid", source), _int(s, "deps", source),
                    _int(s, "hasdep", source), s.line, _int(s, "xfer", source) if "xfer" in s.attrs else None))
            vals = [_int(t, k, source) for k in TB_ATTRS]
            tbs.append(ThreadBlock(*vals, tuple(steps), t.line))
        vals = [_int(g, k, source) for k in GPU_ATTRS]
        for key in ("i_chunks", "o_chunks", "s_chunks"):
            _at_most(g, key, source)
        gpus.append(Gpu(*vals, tuple(tbs), g.line))
    return Program(dict(root.attrs), tuple(gpus), root.line, tuple(notes))


def read_xml(path_or_text: str | Path) -> tuple[Program, str]:
    """(program, source name) from a path or from XML text (anything starting with ``<`` after blanks)."""
    if isinstance(path_or_text, str) and path_or_text.lstrip(" \r\n\t").startswith("<"):
        return parse_xml(path_or_text, "<xml text>"), "<xml text>"
    path = Path(path_or_text)
    if not path.is_file():
        raise InputError(str(path), "file", "an existing MSCCL XML file")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise InputError(str(path), "line 1", "UTF-8 text (this is not an XML file)") from None
    return parse_xml(text, str(path)), str(path)
