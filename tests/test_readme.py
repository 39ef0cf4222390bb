"""The README: its Python example runs as written, and its study tables are the generated ones."""

import re
from pathlib import Path

from depthattn.cli import main
from depthattn.data.tokenizer import word_level_tokenizer
from depthattn.files import edited_files, write_checksums
from tests.helpers import tiny_model

README = Path(__file__).parent.parent / "README.md"


def test_readme_python_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has a Python example"
    monkeypatch.chdir(tmp_path)
    demo = tmp_path / "runs" / "demo" / "depth_attention" / "final"  # what `make demo` writes, in small
    tokenizer = word_level_tokenizer(("the", "a", "of"))
    tokenizer.save_pretrained(demo)
    tiny_model(vocab_size=len(tokenizer)).save_pretrained(demo)
    write_checksums(demo)
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    assert (tmp_path / "my-model" / "model.safetensors").exists()
    assert "chat_template.jinja (new)" in edited_files(demo)  # the chat template example
    assert main(["checksums", str(demo)]) == 0 and edited_files(demo) == []


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
