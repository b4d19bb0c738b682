"""The documentation holds together: every relative link in README.md and docs/ resolves, and
nothing in the repository points at a file outside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = ("../" + "shared/", "DESIGN" + ".md")  # spelt apart: this file must not match
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a web address, or an anchor in the same page
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert len(PAGES) > 5 and broken == []


def test_nothing_cites_a_file_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    citing = []
    for name in tracked:
        path = ROOT / name
        if path.suffix in {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".cfg"} or \
                path.name in {"Makefile", "Dockerfile"} or path.name.endswith(".Dockerfile"):
            text = path.read_text(errors="replace")
            if any(outside in text for outside in OUTSIDE):
                citing.append(name)
    assert citing == []


def test_the_readme_is_one_screen_of_what_and_links():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 160
    first_screen = "\n".join(readme.splitlines()[:12])
    assert "make demo" in first_screen and "make test" in first_screen
