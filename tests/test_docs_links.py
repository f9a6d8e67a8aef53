"""Every relative link in the documentation leads somewhere: README.md, CHANGELOG.md and
docs/**/*.md link to files that exist, and every `#anchor` to a heading of the file it names,
slugged as GitHub slugs headings (lowercase; spaces to '-'; punctuation other than '-' and '_'
dropped; a repeated heading gets '-1', '-2', ...).

Links to other sites are not followed (no network in the tests), and links inside code blocks
are not links.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
"""An inline link `[text](target "title")`; images (`![...]`) are checked the same way below."""
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def doc_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    if (ROOT / "CHANGELOG.md").exists():
        files.append(ROOT / "CHANGELOG.md")
    return files


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lowercase, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters and digits of any script, and '_'
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    found = set(HTML_ANCHOR.findall(text))
    for heading in HEADING.findall(text):
        base = slug(heading)
        n = seen.get(base, 0)
        found.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return found


def targets(path: Path) -> list[str]:
    text = prose(path.read_text())
    return [*LINK.findall(text), *IMAGE.findall(text), *REFERENCE.findall(text)]


def problems(path: Path) -> list[str]:
    found = []
    for target in targets(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}: ({target})"
        if not dest.exists():
            found.append(f"{where}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.is_file() and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            found.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    return found


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert problems(path) == []


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Live scheduler through the API (`bench/e2e.py`)", "live-scheduler-through-the-api-benche2epy"),
    ("Where it stands: the look-ahead as the default profile (2026-11-22)",
     "where-it-stands-the-look-ahead-as-the-default-profile-2026-11-22"),
    ("Snapshots: what would the scheduler do?", "snapshots-what-would-the-scheduler-do"),
    ("FragAware (without look-ahead) against FGD on every trace (same 10 seeds, unallocated GPU % at arrived = 100 %)",
     "fragaware-without-look-ahead-against-fgd-on-every-trace-same-10-seeds-unallocated-gpu--at-arrived--100-"),
    ("gpufleet's policy: FragAware", "gpufleets-policy-fragaware"),
    ("Per-node configs", "per-node-configs"),
    ("The `queueing` section of a profile", "the-queueing-section-of-a-profile"),
    ("snake_case stays", "snake_case-stays"),
])
def test_slugs_follow_github(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_and_a_broken_anchor_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n\n## Twice\n\n## Twice\n\n[ok](b.md#two) [ok](#twice-1) "
                                   "[gone](missing.md) [bad](b.md#three)\n\n```md\n[in code](nowhere.md)\n```\n")
    (tmp_path / "b.md").write_text("# B\n\n## Two\n")
    assert problems(tmp_path / "a.md") == ["a.md: (missing.md): no such file missing.md",
                                           "a.md: (b.md#three): no heading with anchor #three in b.md"]
