"""Is a patch's change already in a tree, in other words? Pure functions on text.

Post-image equivalence: every line a patch adds is already in the target file,
ignoring whitespace and comments; YAML and TOML files are compared as parsed
data (the same settings with other comments or layout are the same change).
A patch is cut into its hunks by scripts.diffparse, so each hunk can be judged alone.
"""

from __future__ import annotations

import io
import re
import tokenize

import tomllib

from scripts.errors import KitError

STRUCTURED = (".yaml", ".yml", ".toml")
# Lines that say nothing on their own (closing brackets, bare keywords): they match anywhere.
TRIVIAL = re.compile(
    r"^(?:[()\[\]{},:;]*|else:|try:|finally:|pass|return|break|continue|\"\"\"|''')$"
)


class EquivalenceError(KitError):
    """A file cannot be compared as asked."""


def python_code(text: str) -> str:
    """Python source without comments (tokenize-exact); the text as is when it does not tokenize."""
    try:
        tokens = [
            t
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type != tokenize.COMMENT
        ]
        return tokenize.untokenize(tokens)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text


def strip_comment(line: str, suffix: str) -> str:
    if suffix == ".py":
        return python_code(line + "\n") if "#" in line else line
    if suffix in (".yaml", ".yml", ".toml", ".cfg", ".ini", ".sh"):
        return re.sub(r"(^|\s)#.*$", "", line)
    return line


def normalized(line: str, suffix: str) -> str:
    """A line with comments and every whitespace removed."""
    return re.sub(r"\s+", "", strip_comment(line, suffix))


def code_lines(text: str, suffix: str) -> set[str]:
    """The normalized lines of a file (Python: with comments taken out by the tokenizer)."""
    body = python_code(text) if suffix == ".py" else text
    return {normalized(x, suffix) for x in body.splitlines()} - {""}


def meaningful(lines: tuple[str, ...], suffix: str) -> list[str]:
    return [n for n in (normalized(x, suffix) for x in lines) if n and not TRIVIAL.match(n)]


def lines_present(added: tuple[str, ...], target_text: str | None, suffix: str) -> bool:
    """Every meaningful added line is somewhere in the target file (and there is at least one)."""
    wanted = meaningful(added, suffix)
    if target_text is None or not wanted:
        return False
    have = code_lines(target_text, suffix)
    return all(w in have for w in wanted)


def parse_structured(text: str, suffix: str) -> object:
    """The data of a TOML or YAML text; None when it does not parse (then it equals nothing)."""
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return None
    try:
        import yaml  # noqa: PLC0415 -- only rebase compares YAML; the rest of the kit needs no third-party module
    except ImportError as exc:
        raise EquivalenceError(
            "PyYAML is not installed, so YAML files cannot be compared as data",
            "run it through nox (nox -s rebase), or: pip install -r ci/kit-dev-tools.txt",
        ) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def same_data(post_image: str, target_text: str | None, suffix: str) -> bool:
    """A YAML/TOML file holds the same data as the target's (comments, quoting, order of keys aside)."""
    if target_text is None:
        return False
    mine = parse_structured(post_image, suffix)
    return mine is not None and mine == parse_structured(target_text, suffix)


def suffix_of(path: str) -> str:
    dot = path.rfind(".")
    return path[dot:] if dot > path.rfind("/") else ""


def file_equivalent(
    path: str, added: tuple[str, ...], post_image: str | None, target_text: str | None
) -> bool:
    """The change a patch makes to one file is in the target: as data for YAML/TOML, else line by line."""
    suffix = suffix_of(path)
    if suffix in STRUCTURED and post_image is not None:
        return same_data(post_image, target_text, suffix)
    return lines_present(added, target_text, suffix)
