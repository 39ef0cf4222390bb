"""docs/guide.md, as a new user follows it: every bash block runs, in order, in a fresh folder."""

import os
import re
import subprocess
import sys
from itertools import islice
from pathlib import Path

from depthattn.data import embedded_corpus_documents

GUIDE = Path(__file__).parents[1] / "docs" / "guide.md"


def test_every_command_of_the_guide_runs(tmp_path):
    texts = tmp_path / "my_texts"
    (texts / "more").mkdir(parents=True)
    # some with an extension, some without; short, so that each evaluation of the held-out split is quick
    for i, document in enumerate(islice(embedded_corpus_documents(), 48)):
        (texts / ("more" if i % 2 else ".") / (f"part{i:02d}" + (".txt" if i % 3 else ""))).write_text(document[:8000])
    (tmp_path / "configs").symlink_to(Path(__file__).parents[1] / "configs")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert len(blocks) >= 6
    for block in blocks:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"{block}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
        assert not warnings, f"{block}\n" + "\n".join(warnings)  # its examples are deliberate
    assert (tmp_path / "runs" / "mine" / "final" / "model.safetensors").exists()
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    report = (tmp_path / "my_results" / "my_study.md").read_text()
    assert "| depth_attention | 2 |" in report
