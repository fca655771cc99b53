#!/usr/bin/env python3
"""Every relative link of the repository's markdown resolves: the file or directory exists and,
for `file.md#anchor`, the file has a heading with that GitHub anchor. Links inside code blocks
and code spans are not links. Also: README.md stays a front page of at most 200 lines (the
specification belongs in docs/). Exit 0 clean, 1 with one line per problem (`make lint`).

Usage: docs/check-links.py [FILE.md ...]   (default: every *.md file git tracks or would)
"""
import os
import re
import subprocess
import sys

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FRONT_PAGE, FRONT_PAGE_LINES = "README.md", 200
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def prose(lines):
    """(number, line, line with code spans blanked) of the lines outside fenced code blocks."""
    fence = None
    for n, line in enumerate(lines, 1):
        stripped = line.lstrip()
        if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        yield n, line, re.sub(r"`+[^`]*`+", "", line)


def anchors(path, cache={}):
    """The anchors of a markdown file: its headings' (numbered when repeated), and `<a name>`s."""
    if path not in cache:
        found, seen = set(), {}
        with open(path, encoding="utf-8") as f:
            for _, line, _ in prose(f.read().splitlines()):
                m = HEADING.match(line)
                if m:
                    base = slug(m.group(2))
                    k = seen.get(base, 0)
                    seen[base] = k + 1
                    found.add(base if k == 0 else f"{base}-{k}")
                found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
        cache[path] = found
    return cache[path]


def check(md):
    broken = []
    with open(md, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for n, _, line in prose(lines):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, …
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(dest):
                broken.append(f"{md}:{n}: {target}: no such file")
            elif anchor and dest.endswith(".md"):
                if anchor not in anchors(dest):
                    broken.append(f"{md}:{n}: {target}: no heading #{anchor} in {dest}")
    return broken


def main(argv):
    files = argv or subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], capture_output=True, text=True, check=True
    ).stdout.split()
    files = [f for f in files if "node_modules" not in f]
    broken = [b for f in files for b in check(f)]
    if os.path.exists(FRONT_PAGE):
        with open(FRONT_PAGE, encoding="utf-8") as f:
            lines = len(f.read().splitlines())
        if lines > FRONT_PAGE_LINES:
            broken.append(f"{FRONT_PAGE}: {lines} lines, over {FRONT_PAGE_LINES}: move the detail to a page in docs/")
    for b in broken:
        print(b)
    print(f"links: {len(files)} files, {len(broken)} problems")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
