"""The README: its Python example runs as written, and its study tables are the generated ones."""

import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_readme_python_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has a Python example"
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    assert (tmp_path / "my-model" / "model.safetensors").exists()


def test_readme_study_tables_are_the_generated_ones():
    """Every table row of the README's study section is a row of docs/results/study.md, which `depthattn study`
    writes from the committed cells: regenerate (`make study-report`) and paste again when they change."""
    text = README.read_text()
    section = text[text.index("### Where Depth-Attention stands"):text.index("### The demo")]
    generated = set((README.parent / "docs" / "results" / "study.md").read_text().splitlines())
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert len(rows) > 10
    stale = [row for row in rows if row not in generated]
    assert not stale, f"README rows not in docs/results/study.md (regenerate and paste): {stale}"
    progress = next(line for line in generated if line.startswith("Finished:"))
    assert progress in section, "the README's study progress is not the one docs/results/study.md counts"
