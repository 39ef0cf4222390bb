"""Dataset loaders for the local task YAMLs (`custom_dataset: !function local_data.load_...`).

They read the JSONL files next to this module, so the tasks work from any working directory and never
touch a dataset hub or the datasets cache."""

import json
from pathlib import Path

HERE = Path(__file__).parent
MC_FILE = "shakespeare_mc.jsonl"
LASTWORD_FILE = "shakespeare_lastword.jsonl"
SPLITS = ("test", "fewshot")


def read_rows(name: str) -> list[dict]:
    with open(HERE / name, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def _dataset(name: str):
    import datasets

    rows = read_rows(name)
    return datasets.DatasetDict(
        {split: datasets.Dataset.from_list([row for row in rows if row["split"] == split]) for split in SPLITS})


def load_mc(**kwargs):
    return _dataset(MC_FILE)


def load_lastword(**kwargs):
    return _dataset(LASTWORD_FILE)
