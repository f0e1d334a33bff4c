"""Write a :class:`Program` as MSCCL XML the runtimes' hand-written tokenizer accepts (§1.1).

No XML declaration, no TABs, one element per line with all its attributes on that line, 2-space
indentation, double-quoted values, plain decimal integers, escaped strings.
"""
from __future__ import annotations

from xml.sax.saxutils import quoteattr

from ..program import Program, Step, ThreadBlock


def _attrs(pairs) -> str:
    out = []
    for key, value in pairs:
        if isinstance(value, (bool, int)):
            out.append(f'{key}="{int(value)}"')
        else:
            out.append(f"{key}={_quote(str(value))}")
    return " ".join(out)


def _quote(text: str) -> str:
    quoted = quoteattr(text, {'"': "&quot;", "\n": " ", "\r": " ", "\t": " "})
    if quoted.startswith("'"):  # quoteattr picks single quotes when the text has a double quote
        quoted = '"' + quoted[1:-1].replace('"', "&quot;") + '"'
    return quoted


def _step(step: Step) -> str:
    return "      <step " + _attrs((
        ("s", step.s), ("type", step.type), ("srcbuf", step.srcbuf), ("srcoff", step.srcoff),
        ("dstbuf", step.dstbuf), ("dstoff", step.dstoff), ("cnt", step.cnt), ("depid", step.depid),
        ("deps", step.deps), ("hasdep", step.hasdep)) + ((("xfer", step.xfer),) if step.xfer is not None else ())) + "/>"


def _tb(tb: ThreadBlock) -> list[str]:
    head = "    <tb " + _attrs((("id", tb.id), ("send", tb.send), ("recv", tb.recv), ("chan", tb.chan))) + ">"
    return [head, *(_step(s) for s in tb.steps), "    </tb>"]


def write_xml(program: Program) -> str:
    lines = ["<algo " + _attrs(program.header.items()) + ">"]
    for gpu in program.gpus:
        lines.append("  <gpu " + _attrs((("id", gpu.id), ("i_chunks", gpu.i_chunks), ("o_chunks", gpu.o_chunks),
                                         ("s_chunks", gpu.s_chunks))) + ">")
        for tb in gpu.tbs:
            lines.extend(_tb(tb))
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"
