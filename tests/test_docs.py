"""README.md and docs/: the README fits on a screen, every link reaches a file and a heading, and every
``autotaccl`` command written out in a shell block parses as the command line reads it. (The README's
step-by-step is run as written by tests/commands/test_papercuts.py.)"""
from __future__ import annotations

import re
import shlex

import pytest

from autotaccl.cli import _command, build_parser
from support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)?(?:#([^)\s]+))?\)")


def anchors(path) -> set[str]:
    """GitHub's anchors of the page's headings: lower case, punctuation dropped, spaces as dashes."""
    heads = [line.lstrip("#").strip() for line in path.read_text().splitlines() if line.startswith("#")
             and not line.startswith("#!")]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def shell_commands(text: str) -> list[str]:
    """The ``autotaccl`` lines of the page's bash blocks, continuations joined, comments cut."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("autotaccl "):
                found.append(line)
    return found


def test_the_readme_fits_on_a_screen():
    """Each row of its command table a line or two (at most 240 characters: two lines of a wide terminal), the whole under 80 lines."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) < 80
    rows = [line for line in lines if line.startswith("| `")]
    assert len(rows) >= 10 and max(map(len, rows)) <= 240, max(rows, key=len)


def test_the_two_setup_commands_come_first():
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert blocks[0].strip().endswith("autotaccl demo") and blocks[1].strip() == "bash .ci/run"


def test_each_concept_is_defined_once_in_the_readme():
    text = (REPO / "README.md").read_text()
    for concept in ("Sketch", "Attainable bound", "Band", "Fidelity"):
        assert text.count(f"* **{concept}**:") == 1, concept
    for page in PAGES[1:]:
        assert "* **" + "Attainable bound**:" not in page.read_text(), page.name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_reaches_a_file_and_its_heading(page):
    for target, anchor in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path = (page.parent / target).resolve() if target else page
        assert path.is_file(), (page.name, target)
        if anchor:
            assert anchor in anchors(path), (page.name, target, anchor)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page):
    """Backquoted repository paths (``hardware/README.md``, ``benchmarks/synthesis.py``) name real files."""
    named = set(re.findall(r"`((?:autotaccl|benchmarks|docs|examples|hardware|search_spaces|tests|runners)/[\w./-]+)`",
                           page.read_text()))
    missing = [n for n in named if not (REPO / n.rstrip("/")).exists() and "<" not in n and "*" not in n]
    assert missing == []


def test_every_written_out_command_parses():
    """Every ``autotaccl ...`` line without placeholders (``[...]``, ``...``, ``<...>``) in a bash block of the
    README or docs/ is accepted by the command line's parser as written."""
    parser = build_parser()
    checked = 0
    for page in PAGES:
        for line in shell_commands(page.read_text()):
            if any(mark in line for mark in ("[", "...", "<", "$")):
                continue
            words = shlex.split(line)[1:]
            words = words[:next((i for i, w in enumerate(words) if w in (">", ">>", "|", "&&")), len(words))]
            parser.parse_args(words)
            checked += 1
    assert checked >= 15


def test_each_command_help_ends_with_the_pages_its_readme_row_links(monkeypatch):
    """A README row's "more" column (links and backquoted pages) is what the row's commands' ``--help``
    names on its last line (of an 80-column terminal), so the terminal points at the README's page."""
    monkeypatch.setenv("COLUMNS", "80")
    wanted: dict[str, set[str]] = {}
    for row in (REPO / "README.md").read_text().splitlines():
        if not row.startswith("| `"):
            continue
        first, *_, more = [cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]]
        pages = set(re.findall(r"\]\(([^)\s]+)\)", more)) | set(re.findall(r"`([\w./-]+\.md)`", more))
        for code in re.findall(r"`([^`]+)`", first):
            words = code.split()
            name = " ".join(words[:2]) if words[0] == "topo" else words[0]
            wanted.setdefault(name, set()).update(pages)
    assert len(wanted) >= 18 and all(wanted.values())
    parser = build_parser()
    for name, pages in wanted.items():
        last = _command(parser, name).format_help().strip().splitlines()[-1]
        assert last.startswith("See ") and set(last[len("See "):].split(", ")) == pages, (name, last)
