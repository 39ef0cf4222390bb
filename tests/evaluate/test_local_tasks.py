"""The local lm-eval tasks' data: what the build script makes from the held-out split, small enough to ship."""

from depthattn.data import document_split
from depthattn.data.prepare import DEFAULT_SEED, DEFAULT_VAL_FRACTION
from depthattn.evaluate.tasks import TASKS_DIR, build, local_data


def test_local_task_files_are_what_the_build_script_makes(tmp_path):
    built = build.build(tmp_path)
    assert sum(len(content.encode()) for content in built.values()) < 200_000
    for name, content in built.items():
        assert (TASKS_DIR / name).read_text(encoding="utf-8") == content, f"rebuild {name}: python -m {build.__name__}"
    held_out = [d["text"] for d in build.held_out_documents()]
    assert all(document_split(t, DEFAULT_SEED, DEFAULT_VAL_FRACTION) == "val" for t in held_out)
    for name in (local_data.MC_FILE, local_data.LASTWORD_FILE):
        rows = local_data.read_rows(name)
        assert [r["split"] for r in rows].count("test") == build.NUM_TEST
        assert [r["split"] for r in rows].count("fewshot") == build.NUM_FEWSHOT
        assert all(any(r["context"] in text for text in held_out) for r in rows)  # passages of held-out documents
    for row in local_data.read_rows(local_data.MC_FILE):
        assert len(set(row["choices"])) == 4 and row["context"].endswith("\n")
        assert any(row["context"] + row["choices"][row["label"]] in text for text in held_out)
    for row in local_data.read_rows(local_data.LASTWORD_FILE):
        assert row["target"].isalpha() and any(row["context"] + " " + row["target"] in text for text in held_out)
        assert build.word_in(row["target"], row["context"])  # guessable: the word occurs earlier in the passage
