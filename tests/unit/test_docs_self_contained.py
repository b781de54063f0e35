"""The repository explains itself: its docs and code point at nothing outside it.

Whoever carries the code on has the repository only. A docstring that says "see DESIGN.md
section 6", or a README link to a file that is not in the tree, sends them nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("traceml", "tui", "benchmarks", "examples", "tests", "docs")
SUFFIXES = {".py", ".pyi", ".c", ".md", ".toml", ".tcss"}
OUTSIDE = re.compile(r"\b(DESIGN|STYLE)\.md\b|\.\./shared\b|\.\./\.library\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _texts() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for top in SOURCES:
        files += [
            p
            for p in (ROOT / top).rglob("*")
            if p.suffix in SUFFIXES and "__pycache__" not in p.parts and p.is_file()
        ]
    return files


def outside_references(text: str) -> list[str]:
    """The lines of `text` that name a file kept outside the repository."""
    return [line.strip() for line in text.splitlines() if OUTSIDE.search(line)]


def broken_links(text: str, here: Path) -> list[str]:
    """Relative Markdown links in `text` (a file in `here`) whose target is not in the tree."""
    broken = []
    for target in LINK.findall(text):
        path = target.split("#", 1)[0]
        if not path or re.match(r"^[a-z][a-z0-9+.-]*:", path):  # an anchor, http:, mailto:
            continue
        if not (here / path).resolve().exists():
            broken.append(target)
    return broken


def test_the_checks_see_what_they_look_for() -> None:
    assert outside_references('"""Rules (DESIGN.md section 6)."""\nok\n') == [
        '"""Rules (DESIGN.md section 6)."""'
    ]
    assert outside_references("see ../shared/notes and STYLE.md") != []
    assert outside_references("docs/architecture.md, README 'Diagnoses'") == []
    assert broken_links("[a](docs/architecture.md) [b](nowhere.md#x) [c](https://x.org)", ROOT) == [
        "nowhere.md#x"
    ]


def test_no_file_of_the_repository_points_outside_it() -> None:
    found = {
        str(p.relative_to(ROOT)): hits
        for p in _texts()
        if p.name != Path(__file__).name
        and (hits := outside_references(p.read_text(errors="replace")))
    }
    assert found == {}


def test_every_relative_link_of_the_docs_resolves() -> None:
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    assert len(docs) > 2
    found = {
        str(p.relative_to(ROOT)): bad
        for p in docs
        if (bad := broken_links(p.read_text(), p.parent))
    }
    assert found == {}
