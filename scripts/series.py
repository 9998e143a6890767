"""The patch series: a quilt-like `series` file naming git format-patch files.

Each patch carries kit-internal trailers in its message:
  Upstream-Status: Pending | Submitted [url] | Backport [ref] | Inappropriate [why]
  Kit-Patch: <slug>     (stable identity; the file is named NNNN-<slug>.patch)
  Kit-Off-NPU: <file>::<unit>: <why>   (optional: a declared change off NPU, one per unit)
  Upstream-Evidence: <url> (<relation>)   (optional: where an upstream tree shows the change)
All are kept in patches/ and stripped from what goes upstream.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass
from email.header import decode_header, make_header
from pathlib import Path

from scripts import handfile, records
from scripts.errors import KitError
from scripts.report import progress

KIT_TRAILERS = ("Upstream-Status", "Upstream-Evidence", "Kit-Patch", "Kit-Off-NPU")
UPSTREAM_STATUS = re.compile(
    r"^(Pending|Submitted \[\S.*\]|Backport \[\S.*\]|Inappropriate \[\S.*\])$"
)
SLUG_MAX = 60  # NNNN-<slug>.patch stays far under a file system's 255-byte name limit
SLUG = re.compile(rf"^[a-z0-9][a-z0-9-]{{0,{SLUG_MAX - 1}}}$")
SLUG_RULE = (
    f"a slug is 1 to {SLUG_MAX} characters of a-z, 0-9 and '-', starting with a letter or digit"
)


class SeriesError(KitError):
    """The series file and the patch files disagree, or a patch is malformed."""


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    slug: str
    subject: str
    upstream_status: str

    @property
    def text(self) -> str:
        # bytes, not read_text: its newline translation would drop the CRs of a CRLF file's lines
        return self.path.read_bytes().decode("utf-8")

    @property
    def already_upstream(self) -> bool:
        """`Backport [ref]`: upstream already holds this change, so no PR made from the series carries
        it."""
        return self.upstream_status.startswith("Backport ")

    @property
    def status_label(self) -> str:
        """The status for a table: a Backport's ref is a long URL, so its label says what it means."""
        return (
            "Backport (already upstream)"
            if self.already_upstream
            else self.upstream_status.split(" [")[0]
        )


def parse_series(text: str) -> list[str]:
    """Patch names in order; blank lines and `#` comments are ignored."""
    names = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def trailer(message: str, key: str) -> str | None:
    """The value of the last `key:` trailer line in a patch header (before its `---` and diff)."""
    values = header_trailers(message, key)
    return values[-1] if values else None


def header_trailers(message: str, key: str) -> list[str]:
    """Every `key:` trailer value in a patch header (before its `---` and diff)."""
    head = []
    for line in message.splitlines():
        if line.startswith("diff --git") or line == "---":
            break
        head.append(line)
    return trailer_values("\n".join(head), key)


TRAILER_LINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*: ")
GIT_MADE = (
    "(cherry picked from commit "  # a line git itself adds to a trailer block (cherry-pick -x)
)


def paragraphs(message: str) -> list[list[str]]:
    """A message's paragraphs (runs of lines between blank lines), each as its lines."""
    found: list[list[str]] = [[]]
    for line in message.splitlines():
        if line.strip():
            found[-1].append(line)
        elif found[-1]:
            found.append([])
    return [p for p in found if p]


def is_trailer_block(lines: list[str]) -> bool:
    """Every line a `Token: value` trailer, its continuation (indented) or a line git adds there, as
    git interpret-trailers reads a block that git or the kit wrote."""
    return (
        bool(lines)
        and TRAILER_LINE.match(lines[0]) is not None
        and all(
            TRAILER_LINE.match(line) or line[:1] in (" ", "\t") or line.startswith(GIT_MADE)
            for line in lines
        )
    )


def values_in(lines: list[str], key: str) -> list[str]:
    prefix = f"{key}:"
    return [line[len(prefix) :].strip() for line in lines if line.startswith(prefix)]


def trailer_values(message: str, key: str) -> list[str]:
    """Every `key:` trailer's value in the message's trailer block: its last paragraph, when that is
    all trailers (git's rule). A `Kit-Patch: x` line in the body above it is text, not a trailer."""
    paras = paragraphs(message)
    return values_in(paras[-1], key) if paras and is_trailer_block(paras[-1]) else []


def split_trailers(message: str) -> tuple[str, str]:
    """(the message before its trailer block, the block with its newline), ("message", "") where it has
    none."""
    lines = message.rstrip("\n").split("\n")
    start = len(lines)
    while start > 0 and lines[start - 1].strip():
        start -= 1
    block = lines[start:]
    if start == 0 or not is_trailer_block(block):
        return message, ""
    return "\n".join(lines[:start]).rstrip("\n") + "\n", "\n".join(block) + "\n"


def squashed_slugs(message: str) -> list[str]:
    """The Kit-Patch of each patch message a squash joined, in order: the trailer block of the message,
    and each earlier paragraph that is a whole trailer block of the kit's own (both Upstream-Status
    and Kit-Patch, as every patch message ends). A lone `Kit-Patch: x` line or paragraph in the body
    is not one."""
    paras = paragraphs(message)
    earlier = [
        p
        for p in paras[:-1]
        if is_trailer_block(p) and values_in(p, "Upstream-Status") and values_in(p, "Kit-Patch")
    ]
    return [v for p in earlier for v in values_in(p, "Kit-Patch")] + trailer_values(
        message, "Kit-Patch"
    )


def with_one_identity(message: str, slug: str) -> str:
    """A squash's message keeping one patch's identity: every kit trailer block's kit lines out, then
    one block at the end.

    The block keeps the Upstream-Status of the kept slug's own paragraph (a squash joins
    each patch's message, trailers included).
    """
    paras = paragraphs(message)
    own = [
        values_in(p, "Upstream-Status")
        for p in paras
        if is_trailer_block(p) and slug in values_in(p, "Kit-Patch")
    ]
    status = (
        next((s[-1] for s in own if s), None)
        or (trailer_values(message, "Upstream-Status") or ["Pending"])[0]
    )
    body = re.sub(r"\n{3,}", "\n\n", strip_kit_trailers(message)).strip("\n")
    return f"{body}\n\nUpstream-Status: {status}\nKit-Patch: {slug}\n"


def subject(patch_text: str) -> str:
    """The Subject: header of a format-patch file, unfolded and decoded.

    git writes a non-ASCII subject as RFC 2047 encoded words (`=?UTF-8?q?...?=`).
    """
    lines = patch_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Subject: "):
            parts = [line[len("Subject: ") :]]
            for cont in lines[i + 1 :]:
                if not cont.startswith((" ", "\t")):
                    break
                parts.append(cont.strip())
            return str(make_header(decode_header(" ".join(parts))))
    return ""


def patch_file_name(index: int, slug: str) -> str:
    return f"{index:04d}-{slug}.patch"


def describe(name: str, text: str, path: Path) -> Patch:
    """Validate one patch's kit headers; raise SeriesError naming the patch and the fix."""
    status = trailer(text, "Upstream-Status")
    if status is None:
        raise SeriesError(
            f"patch {name} has no Upstream-Status: header",
            "add a trailer 'Upstream-Status: Pending' (or Submitted [url] / Backport [ref] / "
            "Inappropriate [why])",
        )
    if not UPSTREAM_STATUS.match(status):
        raise SeriesError(
            f"patch {name} has Upstream-Status: {status!r}",
            "use Pending, Submitted [url], Backport [ref] or Inappropriate [why]",
        )
    for key in ("Upstream-Status", "Kit-Patch"):
        found = header_trailers(text, key)
        if len(found) > 1:
            raise SeriesError(
                f"patch {name} carries {len(found)} {key}: trailers ({', '.join(found)})",
                f"keep one {key}: line in its message (in the checkout, then nox -s refresh), "
                "or restore it: git checkout -- patches",
            )
    slug = trailer(text, "Kit-Patch")
    why = slug_problem(slug)
    if why is not None:
        good = suggested_slug(slug, subject(text))
        raise SeriesError(
            f"patch {name} {why}",
            f"{SLUG_RULE}: write 'Kit-Patch: {good}' in it and name the file NNNN-{good}.patch "
            "(here and in patches/series), or restore it: git checkout -- patches",
        )
    assert slug is not None
    return Patch(name=name, path=path, slug=slug, subject=subject(text), upstream_status=status)


def slug_problem(slug: str | None) -> str | None:
    """What is wrong with a Kit-Patch: value (None: nothing)."""
    if not slug:
        return "has no Kit-Patch: trailer (its stable identity)"
    if len(slug) > SLUG_MAX:
        return f"has a Kit-Patch: slug of {len(slug)} characters ({slug[:24]}...), over {SLUG_MAX}"
    if not SLUG.match(slug):
        return f"has Kit-Patch: {slug!r}, which holds characters a slug may not"
    return None


def suggested_slug(slug: str | None, subject_line: str) -> str:
    """A valid slug close to what the user wrote (else to the subject): for a fix that works as
    written."""
    for source in (slug or "", re.sub(r"^(\[[^]]*\]\s*)+", "", subject_line)):
        made = re.sub(r"[^a-z0-9]+", "-", source.lower()).strip("-")[:SLUG_MAX].rstrip("-")
        if made:
            return made
    return "patch"


def amend_slug_command(slug: str, with_status: bool, had: int = 1) -> str:
    """The git command that sets HEAD's Kit-Patch: (git's default would add a second one); `had`: how
    many Kit-Patch: lines its message holds now (git's replace takes out one, so several are
    filtered out first)."""
    status = " --trailer 'Upstream-Status: Pending'" if with_status else ""
    if had > 1:
        return (
            f"git log -1 --format=%B | grep -v '^Kit-Patch:' | git commit -q --amend -F - "
            f"--trailer 'Kit-Patch: {slug}'{status}"
        )
    return f"git -c trailer.Kit-Patch.ifexists=replace commit --amend --no-edit --trailer 'Kit-Patch: {slug}'{status}"


ENTRY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.patch$")


def check_entry(name: str) -> None:
    """A series entry is a plain file name inside patches/: nothing outside it is ever read or written."""
    if not ENTRY.match(name) or ".." in name:
        raise SeriesError(
            f"series entry {name!r} is not a plain NNNN-<slug>.patch file name inside patches/",
            "list patch files by name only (no folders, no '..'), each ending in .patch",
        )


def check_patch_bytes(name: str, data: bytes) -> str:
    """The text of a patch file, or a SeriesError naming what makes it unusable."""
    text = handfile.check_bytes(f"patches/{name}", data)
    if converted_to_crlf(text):
        raise SeriesError(
            f"patches/{name} has CRLF line endings (an editor or git's autocrlf converted it)",
            f"restore LF endings: git checkout -- patches/{name} (.gitattributes keeps patches "
            "exact), or dos2unix",
        )
    if "\ndiff --git " not in text:
        raise SeriesError(
            f"patches/{name} holds no diff", "remove it from the series, or re-export it"
        )
    if BINARY_WITHOUT_DATA.search(text):
        raise SeriesError(
            f"patches/{name} changes a binary file without its data ('Binary files ... differ')",
            "re-export it with nox -s refresh (the kit exports binary changes with --binary)",
        )
    return text


# Lines git writes itself, never with a CR: one that ends in CR means the whole file was converted.
# The lines of a diff's content may end in CR (a CRLF file's change): those are the patch's own
# bytes.
STRUCTURE = re.compile(r"^(?:From [0-9a-f]{40} |Subject: |diff --git |@@ -\d).*\r$", re.M)


def converted_to_crlf(text: str) -> bool:
    return text.split("\n", 1)[0].endswith("\r") or STRUCTURE.search(text) is not None


BINARY_WITHOUT_DATA = re.compile(r"^Binary files \S+ and \S+ differ$", re.M)


# in patches/ while a swap renames its files into place (refresh, rebase --move)
JOURNAL = ".kit-swap.json"


def staged_name(name: str) -> str:
    """Where a swap writes patches/<name> before renaming it into place."""
    return f".{name}.kit-tmp"


# What a swap writes into patches/ (its patch files, the series, the pin rebase --move changes) and
# removes (patch files only): a journal naming anything else was not written by the kit.
SWAP_WRITES = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._+-]*\.patch|series|upstream\.toml)$")
SWAP_BY = ("refresh", "rebase --move")
SWAP_JOURNAL: records.Schema = {
    "by": records.one_of(*SWAP_BY),
    "writes": records.list_of(records.file_name(SWAP_WRITES, "patches/")),
    "removals": records.list_of(records.file_name(ENTRY, "patches/")),
}


def read_swap_journal(patches_dir: Path) -> tuple[str, list[str], list[str]] | None:
    """(by, writes, removals) of a swap's journal, None when there is none; every entry checked before
    any is acted on: a tampered journal is refused by name and nothing is touched."""
    data = records.load(
        patches_dir / JOURNAL,
        f"patches/{JOURNAL} (a swap's journal)",
        SWAP_JOURNAL,
        f"nothing was touched: restore patches/ from git (git checkout -- patches) and remove "
        f"patches/{JOURNAL}",
        error=SeriesError,
    )
    if data is None:
        return None
    return data["by"], data["writes"], data["removals"]


def finish_swap(patches_dir: Path) -> None:
    """Roll forward a swap of patches/ that a kill -9 cut short: the journal is written only once every
    new file is on disk, so the rest of its renames and removals can be made; then the series is
    whole again."""
    journal = patches_dir / JOURNAL
    found = read_swap_journal(patches_dir)
    if found is None:
        return
    by, writes, removals = found
    for name in writes:
        # a rename another reader (or the swap itself, still running) made first is done already
        with contextlib.suppress(FileNotFoundError):
            os.replace(patches_dir / staged_name(name), patches_dir / name)
    for name in removals:
        (patches_dir / name).unlink(missing_ok=True)
    journal.unlink(missing_ok=True)
    progress(
        f"patches/: finished the swap a stopped {by} had begun ({len(writes)} file(s) written, "
        f"{len(removals)} removed)"
    )


def load_series(patches_dir: Path) -> list[Patch]:
    """Read patches/series and check it against the .patch files beside it."""
    finish_swap(patches_dir)
    series_file = patches_dir / "series"
    if not series_file.is_file():
        raise SeriesError(
            f"{series_file.name} not found in patches/", "create patches/series listing the patches"
        )
    names = parse_series(handfile.read(series_file, "patches/series"))
    for name in names:
        check_entry(name)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SeriesError(
            f"series names {', '.join(dupes)} more than once",
            "list each patch once in patches/series",
        )
    for name in names:
        path = patches_dir / name
        if path.is_symlink():
            raise SeriesError(
                f"patches/{name} is a symbolic link (refresh would write through it)",
                'replace the link by the file itself: cp --remove-destination "$(readlink -f '
                f'patches/{name})" '
                f"patches/{name}",
            )
        if not path.is_file():
            raise SeriesError(
                f"series names {name}, which is not in patches/",
                "restore the file or remove the line from the series",
            )
    listed = set(names)
    strays = sorted(p.name for p in patches_dir.glob("*.patch") if p.name not in listed)
    if strays:
        raise SeriesError(
            f"patches/{strays[0]} is not in the series",
            "add it to patches/series at its place, or delete the file",
        )
    patches = [
        describe(n, check_patch_bytes(n, (patches_dir / n).read_bytes()), patches_dir / n)
        for n in names
    ]
    slugs = [p.slug for p in patches]
    for p in patches:
        if slugs.count(p.slug) > 1:
            raise SeriesError(
                f"two patches share Kit-Patch: {p.slug}", "give each patch its own slug"
            )
    check_names(patches)
    return patches


def check_names(patches: list[Patch]) -> None:
    """Each file is named NNNN-<slug>.patch by its place and slug, as refresh writes it.

    A name changed by hand is refused rather than kept: refresh would otherwise rename it
    back on a checkout that changed nothing (noise in patches/).
    """
    for i, p in enumerate(patches, 1):
        wanted = patch_file_name(i, p.slug)
        if p.name != wanted:
            raise SeriesError(
                f"patches/{p.name} is entry {i} of the series and carries Kit-Patch: {p.slug}, so "
                f"its name is {wanted}",
                f"rename it back: git mv patches/{p.name} patches/{wanted} (and its line in "
                "patches/series)",
            )


def series_header(text: str) -> str:
    """The leading comment block of a series file (comments and blank lines before the first entry)."""
    lines = []
    for raw in text.splitlines():
        if raw.startswith("#") or not raw.strip():
            lines.append(raw)
        else:
            break
    return "\n".join(lines).strip("\n") + "\n" if lines else ""


def render_series(old_text: str, old_slugs: dict[str, str], new: list[tuple[str, str]]) -> str:
    """The series file for new (name, slug) entries, keeping every comment of old_text in place.

    A comment block belongs to the entry below it, and moves, renames or goes with it;
    the header (comments before the first entry) and trailing comments stay where they are.
    """
    header: list[str] = []
    blocks: dict[str, tuple[list[str], str]] = {}  # slug -> (comment lines above, entry line)
    pending: list[str] = []
    seen_entry = False
    for raw in old_text.splitlines():
        name = raw.split("#", 1)[0].strip()
        if not name:
            pending.append(raw)
            continue
        if not seen_entry:
            header, pending, seen_entry = pending, [], True
        blocks[old_slugs.get(name, name)] = (pending, raw)
        pending = []
    if not seen_entry:
        header, pending = pending, []
    out = list(header)
    for name, slug in new:
        above, line = blocks.get(slug, ([], name))
        old_name = line.split("#", 1)[0].strip()
        out += [*above, line.replace(old_name, name, 1) if old_name != name else line]
    out += pending
    return "\n".join(out) + "\n" if out else ""


def series_digest(patches: list[Patch]) -> str:
    """One digest over order, names and bytes: any change to the series changes it."""
    return entries_digest([(p.name, p.path.read_bytes()) for p in patches])


def entries_digest(entries: list[tuple[str, bytes]]) -> str:
    """series_digest of (name, bytes) pairs, before they are files."""
    h = hashlib.sha256()
    for name, data in entries:
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def strip_kit_trailers(message: str) -> str:
    """A commit message or patch file without the kit-internal trailers (for upstream): their lines in
    trailer blocks only (a body line that reads like one is text). In a patch file, only its message
    (before `---`)."""
    lines = message.splitlines(keepends=True)
    end = next(
        (
            i
            for i, line in enumerate(lines)
            if line.rstrip("\r\n") == "---" or line.startswith("diff --git")
        ),
        len(lines),
    )
    kit = tuple(f"{k}:" for k in KIT_TRAILERS)
    out, block = [], []  # block: the paragraph being read, emitted when it ends
    for line in [*lines[:end], None]:
        if line is not None and line.strip():
            block.append(line)
            continue
        trailers = is_trailer_block([b.rstrip("\r\n") for b in block])
        out += [b for b in block if not (trailers and b.startswith(kit))]
        block = []
        if line is not None:
            out.append(line)
    return "".join(out + lines[end:])
