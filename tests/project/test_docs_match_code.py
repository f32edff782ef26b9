"""The docs against the code: every `--flag` the docs give an `oxygen-gym` command exists in that command's parser,
every `oxygen_gym...` name docs/api.md shows imports, a documented signature lists every parameter, and docs/api.md's
"Planned" section lists nothing that exists. Parsers are built, never run (oxygen_gym/cli.py `build_parser`)."""
from __future__ import annotations

import importlib
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

from oxygen_gym.cli import NESTED, SUBCOMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
API = ROOT / "docs" / "api.md"

FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
SPAN = re.compile(r"`([^`\n]+)`")
FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
COMMAND_END = re.compile(r"\||&&|;|\s#|\$\(|\)")  # a shell pipe, a second command, a comment


def code_texts(text: str) -> list[str]:
    """Each fenced block (continued lines joined) and each inline code span outside the blocks."""
    blocks = [b.replace("\\\n", " ") for b in FENCE.findall(text)]
    return blocks + SPAN.findall(FENCE.sub("", text))


def command_of(tokens: list[str]) -> tuple[str, ...] | None:
    """The command words a token list after `oxygen-gym` starts with, or None when it names no command."""
    if not tokens or tokens[0] not in SUBCOMMANDS:
        return None
    return tuple(tokens[:2]) if tuple(tokens[:2]) in NESTED else (tokens[0],)


def commands_with_flags(code: str) -> list[tuple[tuple[str, ...], list[str]]]:
    """(command words, flags) of every `oxygen-gym ...` command line in a piece of code."""
    found = []
    for line in code.splitlines():
        for part in line.split("oxygen-gym ")[1:]:
            part = COMMAND_END.split(part)[0]
            words = command_of(part.split())
            if words is not None:
                found.append((words, FLAG.findall(part)))
    return found


@cache
def options(words: tuple[str, ...]) -> frozenset[str]:
    parser = build_parser(words)
    return frozenset(s for a in parser._actions for s in a.option_strings) | _subparser_options(parser)


def _subparser_options(parser) -> frozenset[str]:
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return frozenset(s for a in subs for p in a.choices.values() for x in p._actions for s in x.option_strings)


def documented_command_flags() -> list[tuple[str, tuple[str, ...], str]]:
    """(doc file, command words, flag) for every flag of every `oxygen-gym` command line in every doc's code."""
    out = []
    for doc in DOCS:
        for code in code_texts(doc.read_text()):
            for words, flags in commands_with_flags(code):
                out += [(doc.name, words, flag) for flag in flags]
    return out


def test_the_docs_name_commands_with_flags():
    """The scan finds what it checks (a parser change that hid every command would pass the next test vacuously)."""
    found = documented_command_flags()
    assert len(found) > 50
    assert {w for _, w, _ in found} >= {("eval", "libero"), ("eval", "merge"), ("serve",), ("bench",), ("train",)}


def test_every_flag_the_docs_give_a_command_exists():
    missing = sorted({f"{doc}: oxygen-gym {' '.join(words)} {flag}" for doc, words, flag in documented_command_flags()
                      if flag not in options(words)})
    assert not missing, "flags in the docs that the command does not take:\n" + "\n".join(missing)


# ---------------------------------------------------------------------------------------------- api.md section 5
def api_section(number: int) -> str:
    text = API.read_text()
    start = re.search(rf"^## {number}\. .*$", text, re.M)
    assert start, f"docs/api.md has no section {number}"
    end = re.search(r"^## ", text[start.end():], re.M)
    return text[start.end(): start.end() + end.start() if end else len(text)]


HEADER = re.compile(r"\*\*`(?:oxygen-gym )?([^`]+)`\*\*")


def section5_blocks() -> list[tuple[list[tuple[str, ...]], str]]:
    """docs/api.md section 5 cut at each bold command (**`oxygen-gym eval libero`**) that starts a line: (the commands
    its bold names name, its text). "**`oxygen-gym eval libero`**, **`eval aloha`** (...) and **`oxygen-gym eval
    merge ...`**" is one block naming four commands."""
    text = api_section(5)
    heads = [h for h in HEADER.finditer(text) if command_of(h.group(1).split())]
    starts = [h.start() for h in heads if h.start() == 0 or text[h.start() - 1] == "\n"]
    blocks = []
    for start, end in zip(starts, [*starts[1:], len(text)]):
        block = text[start:end]
        words = [command_of(h.group(1).split()) for h in HEADER.finditer(block)]
        blocks.append(([w for w in words if w], block))
    return blocks


OTHERS = re.compile(r"\b(eval|demo|serve|collect|train|bench|inspect)(?:'s| --)")


def test_every_flag_in_the_api_command_tables_exists():
    """Section 5's tables and prose give each command's flags as bare `--flag` spans under its bold header; each must
    be a flag of that command (or of a command the same sentence names: "as eval's `--ensemble`")."""
    missing, seen = [], 0
    for commands, block in section5_blocks():
        for sentence in re.split(r"(?<=[.;|])\s", block):
            named = [(m.group(1),) for m in OTHERS.finditer(sentence)]
            named = [w if w[0] not in ("eval",) else ("eval", "libero") for w in named]
            for span in SPAN.findall(sentence):
                if not span.startswith("--"):
                    continue
                for flag in FLAG.findall(span):
                    seen += 1
                    if not any(flag in options(w) for w in commands + named):
                        missing.append(f"{' / '.join(' '.join(w) for w in commands)}: {flag}")
    assert seen > 100, seen
    assert not missing, "docs/api.md section 5 flags the command does not take:\n" + "\n".join(sorted(set(missing)))


# ---------------------------------------------------------------------------------------------- names
DOTTED = re.compile(r"^(oxygen_gym(?:\.\w+)+)(?:\(|$)")  # a name, or a call of it
FROM_IMPORT = re.compile(r"^\s*from (oxygen_gym[\w.]*) import \(?([\w, ]+)\)?\s*(?:#.*)?$", re.M)


def resolve(dotted: str):
    """The object a dotted `oxygen_gym...` name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def api_names() -> list[str]:
    """Every `oxygen_gym.x.Y` (or `oxygen_gym.x.f(...)`) span and every name a `from oxygen_gym... import ...` line in docs/api.md brings in,
    outside the Planned section."""
    text = API.read_text().replace(api_section(7), "")
    names = [m.group(1) for span in SPAN.findall(FENCE.sub("", text)) if (m := DOTTED.match(span.strip()))]
    for block in [*FENCE.findall(text), *SPAN.findall(FENCE.sub("", text))]:
        for module, imported in FROM_IMPORT.findall(block):
            names += [f"{module}.{n.strip()}" for n in imported.split(",") if n.strip()]
    return sorted(set(names))


def test_every_name_the_api_doc_imports_exists():
    names = api_names()
    assert len(names) > 10, names
    broken = []
    for name in names:
        try:
            resolve(name)
        except (ImportError, AttributeError) as e:
            broken.append(f"{name}: {type(e).__name__}: {e}")
    assert not broken, "docs/api.md names that do not import:\n" + "\n".join(broken)


# `Name(a, b, c=1)`: a positional name first, then names with a default or none (`Name(a=)`, `Name(a=X)` and
# `Name(..., a=X)` only mention a keyword)
SIGNATURE = re.compile(r"^([A-Z]\w*)\((\s*\w+\s*(?:,\s*\*?\w+(?:=[^,()]+)?\s*)*)\)$")


def public(name: str):
    for module in ("oxygen_gym", "oxygen_gym.policies", "oxygen_gym.model"):
        obj = getattr(importlib.import_module(module), name, None)
        if obj is not None:
            return obj
    return None


def test_a_documented_full_signature_lists_every_parameter():
    """A span written as a whole signature (`LanguageTask(name, prompt, max_new_tokens=30, ...)` with no `...`) of a
    public class names exactly its parameters."""
    checked, wrong = 0, []
    for doc in DOCS:
        for span in SPAN.findall(FENCE.sub("", doc.read_text())):
            m = SIGNATURE.match(span.strip())
            obj = public(m.group(1)) if m else None
            if obj is None or not callable(obj):
                continue
            written = [p.split("=")[0].strip().lstrip("*") for p in m.group(2).split(",")]
            actual = [p for p in inspect.signature(obj).parameters if p != "self"]
            checked += 1
            if written != actual:
                wrong.append(f"{doc.name}: `{span}` but {m.group(1)} takes {actual}")
    assert checked >= 1
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------------------------------------- Planned
def exists(span: str) -> bool:
    """Whether a Planned item's code span names something that is already there: a file, an importable name, or a
    keyword a public callable takes (`Name(..., kw=...)`)."""
    span = span.strip()
    path = span.split()[0]
    if "/" in path and (ROOT / path).exists():
        return True
    m = re.match(r"^(\w+(?:\.\w+)*)\((.*)\)$", span)
    if m:
        head = m.group(1).split(".")[-1]
        owner = public(m.group(1).split(".")[0])
        target = getattr(owner, head, None) if owner is not None and head != m.group(1).split(".")[0] else owner
        if target is None and head == "from_pretrained":
            target = public("MultiTaskPolicy").from_pretrained
        if target is None:
            return False
        keywords = re.findall(r"(\w+)=", m.group(2))
        params = inspect.signature(target).parameters
        return bool(keywords) and all(k in params for k in keywords)
    if span.startswith("oxygen_gym."):
        try:
            resolve(span)
            return True
        except (ImportError, AttributeError):
            return False
    return False


def planned_items() -> list[str]:
    """The bullet items of docs/api.md section 7 (an item's indented lines continue it)."""
    items: list[str] = []
    for line in api_section(7).splitlines():
        if line.startswith("- "):
            items.append(line[2:])
        elif items and line.startswith(" ") and line.strip():
            items[-1] += " " + line.strip()
    return items


def test_the_planned_section_lists_nothing_that_exists():
    shipped = [span for item in planned_items() for span in SPAN.findall(item) if exists(span)]
    assert not shipped, f"docs/api.md section 7 (Planned) lists what the code has: {shipped}"


@pytest.mark.parametrize("span, there", [
    ("LanguageTask(..., adapter=NAME)", True), ("LanguageTask(..., colour=NAME)", False),
    ("tools/gpu_check.py [--dry-run] --out DIR", True), ("tools/no_such_tool.py", False),
    ("from_pretrained(..., adapters={NAME: PATH} | [NAME, ...])", True),
])
def test_the_planned_check_tells_shipped_from_missing(span, there):
    assert exists(span) is there
