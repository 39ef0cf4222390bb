"""Paste the generated study tables into the hand-written pages (`make study-report` runs this after the study).

A page marks each pasted table with a comment on the line above it:

    <!-- table from docs/results/study/budget_sweep.md: gain -->
    | gain | ... |

and gets that file's first table whose header starts with `| gain |`. The line starting `Progress at this commit,
from docs/results/study.md:` gets that page's `Finished:` line. tests/test_readme.py checks that pasting changes
nothing."""

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", ROOT / "docs" / "results.md"]
MARKER = re.compile(r"<!-- table from (\S+): (.+?) -->")
PROGRESS = "Progress at this commit, from `docs/results/study.md`: "


def table_at(lines: list[str], start: int) -> list[str]:
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def source_table(source: str, first_cell: str) -> list[str]:
    """The first table of `source` (relative to the repository) whose header's first cell is `first_cell`."""
    lines = (ROOT / source).read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"| {first_cell} |")), None)
    if start is None:
        raise SystemExit(f"{source} has no table headed `| {first_cell} |`: regenerate it with `make study-report`")
    return table_at(lines, start)


def pasted(text: str) -> str:
    """`text` with every marked table and the progress line replaced by the generated ones."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        marker = MARKER.fullmatch(lines[i].strip())
        if marker:
            out += source_table(*marker.groups())
            i += 1 + len(table_at(lines, i + 1))
            continue
        if lines[i].startswith(PROGRESS):
            index = (ROOT / "docs" / "results" / "study.md").read_text().splitlines()
            out[-1] = PROGRESS + next(line for line in index if line.startswith("Finished:"))
        i += 1
    return "\n".join(out) + "\n"


def main() -> int:
    for page in PAGES:
        text = page.read_text()
        new = pasted(text)
        if new != text:
            temporary = page.with_name(page.name + ".tmp")
            temporary.write_text(new)
            os.replace(temporary, page)
            print(f"pasted the study tables into {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
