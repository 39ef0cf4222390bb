"""Build the local tasks' data from the embedded corpus's held-out split: `python -m depthattn.evaluate.tasks.build`.

The held-out documents are those `depthattn prepare` puts in "val" with its defaults (document_split with
DEFAULT_SEED and DEFAULT_VAL_FRACTION), so a model trained on the embedded corpus never saw them.

- shakespeare_mc.jsonl: a passage of whole verse lines of one speech (at least MC_CONTEXT_CHARS characters),
  then four candidate next lines: the true one and three verse lines of similar length (0.75x to 1.33x) from
  other held-out documents, in a seeded random order.
- shakespeare_lastword.jsonl (LAMBADA-style): a passage of whole lines (at least LASTWORD_CONTEXT_CHARS
  characters, speaker names included) and a verse line without its last word, a word of at least MIN_WORD
  letters before any closing punctuation that also occurs earlier in the passage, so that the passage
  makes it guessable (LAMBADA kept passages whose last word people could guess from the whole passage).

Passages of one task do not overlap. Deterministic: the same corpus gives byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from functools import partial
from pathlib import Path

from ...data import document_split, embedded_corpus_records
from ...data.prepare import DEFAULT_SEED, DEFAULT_VAL_FRACTION
from ...files import atomic_write_bytes
from .local_data import HERE, LASTWORD_FILE, MC_FILE

SEED = 2606
NUM_TEST = 150
NUM_FEWSHOT = 20
MC_CONTEXT_CHARS = 240  # at least this many characters of whole lines before the lines asked about
MC_LINES = 1  # lines of the continuation to choose
LASTWORD_CONTEXT_CHARS = 320
MAX_CONTEXT_CHARS = 800
MIN_LINE_CHARS, MAX_LINE_CHARS = 24, 72
MIN_WORD = 4
HEADING = re.compile(r"(SCENE|Scene|ACT|Act|Enter|Exit|Exeunt|Re-enter)\b")
LAST_WORD = re.compile(rf" ([A-Za-z]{{{MIN_WORD},}})([^A-Za-z0-9]*)$")


def held_out_documents() -> list[dict]:
    """Records {"title", "part", "text"} of the embedded corpus that `prepare` holds out by default."""

    return [record for record in embedded_corpus_records()
            if document_split(record["text"], DEFAULT_SEED, DEFAULT_VAL_FRACTION) == "val"]


def is_verse(line: str) -> bool:
    """A line of speech: not blank, not a speaker tag (upper case), not a scene heading or stage direction."""
    stripped = line.strip()
    return (MIN_LINE_CHARS <= len(stripped) <= MAX_LINE_CHARS and stripped == line and not stripped.startswith("[")
            and any(c.islower() for c in stripped) and not HEADING.match(stripped))


def passages(lines: list[str], ok_target, min_chars: int, speech_only: bool, accept=None) -> list[tuple[int, int]]:
    """(first context line, target line) pairs: the context is the whole lines directly above the target, at least
    `min_chars` characters (only verse lines of the target's speech with `speech_only`; at most MAX_CONTEXT_CHARS),
    and `accept(first, target)` if given; passages never overlap."""
    found, free_from = [], 0
    for target in range(len(lines)):
        if not ok_target(target):
            continue
        first, chars = target, 0
        while first > free_from and chars < min_chars and (is_verse(lines[first - 1]) or not speech_only):
            first -= 1
            chars += len(lines[first]) + 1
        if min_chars <= chars <= MAX_CONTEXT_CHARS and (accept is None or accept(first, target)):
            found.append((first, target))
            free_from = target + 1
    return found


def source_name(record: dict) -> str:
    return f"{record['title']}, part {record['part']} of {record['num_parts']}"


def starts_verse_run(lines: list[str], target: int) -> bool:
    """Whether `MC_LINES` verse lines start at line `target`."""
    return target + MC_LINES <= len(lines) and all(is_verse(line) for line in lines[target:target + MC_LINES])


def build_mc(documents: list[dict], rng: random.Random) -> list[dict]:
    """Passages of one speech, then the true next `MC_LINES` verse lines among three runs of as many
    consecutive verse lines of similar length from other held-out documents."""
    def runs(lines: list[str]) -> list[str]:
        return ["\n".join(lines[i:i + MC_LINES]) for i in range(len(lines) - MC_LINES + 1)
                if all(is_verse(line) for line in lines[i:i + MC_LINES])]

    pools = [runs(d["text"].split("\n")) for d in documents]
    items = []
    for index, document in enumerate(documents):
        lines = document["text"].split("\n")
        for first, target in passages(lines, partial(starts_verse_run, lines), MC_CONTEXT_CHARS, speech_only=True):
            items.append((index, "\n".join(lines[first:target]) + "\n",
                          "\n".join(lines[target:target + MC_LINES])))
    rng.shuffle(items)
    rows = []
    for index, context, answer in items[:NUM_TEST + NUM_FEWSHOT]:
        pool = sorted({run for other, runs_ in enumerate(pools) if other != index for run in runs_
                       if 0.75 * len(answer) <= len(run) <= 1.33 * len(answer) and run != answer})
        choices = [answer, *rng.sample(pool, 3)]
        rng.shuffle(choices)
        rows.append({"source": source_name(documents[index]), "context": context, "choices": choices,
                     "label": choices.index(answer)})
    return rows


def word_in(word: str, text: str) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text, flags=re.IGNORECASE) is not None


def ends_in_a_word(lines: list[str], target: int) -> bool:
    return is_verse(lines[target]) and LAST_WORD.search(lines[target]) is not None


def lastword_passage(lines: list[str], first: int, target: int) -> tuple[str, str]:
    """The context (lines `first` up to the last word of line `target`) and that word."""
    match = LAST_WORD.search(lines[target])
    if match is None:
        raise ValueError(f"line {target} has no last word to guess: {lines[target]!r}")
    return "\n".join(lines[first:target]) + "\n" + lines[target][:match.start()], match.group(1)


def word_said_before(lines: list[str], first: int, target: int) -> bool:
    context, word = lastword_passage(lines, first, target)
    return word_in(word, context)


def build_lastword(documents: list[dict], rng: random.Random) -> list[dict]:
    """Passages (any lines, speaker names included) that end before the last word of a verse line, a word that
    also occurs earlier in the passage, so that the passage makes it guessable (as LAMBADA was filtered)."""
    items = []
    for document in documents:
        lines = document["text"].split("\n")
        for first, target in passages(lines, partial(ends_in_a_word, lines), LASTWORD_CONTEXT_CHARS,
                                      speech_only=False, accept=partial(word_said_before, lines)):
            context, word = lastword_passage(lines, first, target)
            items.append({"source": source_name(document), "context": context, "target": word})
    rng.shuffle(items)
    return items[:NUM_TEST + NUM_FEWSHOT]


def with_splits(rows: list[dict], prefix: str) -> list[dict]:
    if len(rows) < NUM_TEST + NUM_FEWSHOT:
        raise ValueError(f"only {len(rows)} {prefix} items in the held-out split, {NUM_TEST + NUM_FEWSHOT} wanted")
    return [{"id": f"{prefix}-{i:03d}", "split": "fewshot" if i >= NUM_TEST else "test", **row}
            for i, row in enumerate(rows)]


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n" for row in rows)


def build(out_dir: str | Path = HERE) -> dict[str, str]:
    """Write both data files into `out_dir`; return {file name: content}."""
    documents = held_out_documents()
    files = {
        MC_FILE: jsonl(with_splits(build_mc(documents, random.Random(SEED)), "mc")),
        LASTWORD_FILE: jsonl(with_splits(build_lastword(documents, random.Random(SEED + 1)), "lastword")),
    }

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        atomic_write_bytes(out_dir / name, content.encode("utf-8"))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(HERE), help="output folder (default: next to the task YAMLs)")
    args = parser.parse_args(argv)
    for name, content in build(args.out).items():
        print(f"{Path(args.out) / name}: {content.count(chr(10))} items, {len(content.encode()):,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
