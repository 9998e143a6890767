"""The series as upstream sees it: the same trees, messages without the kit's
trailers, a DCO sign-off from the user's own git identity."""

from __future__ import annotations

import re
from pathlib import Path

from scripts import gitcmd
from scripts.errors import KitError
from scripts.series import strip_kit_trailers

TRAILER_LINE = re.compile(r"^[A-Za-z0-9-]+: \S")


class NoIdentityError(KitError):
    """The user has no git identity to sign off with."""


def user_identity(repo: Path) -> str:
    """`Name <email>` from the user's own git config (not the kit's isolated git), as seen from repo."""
    name, email = (gitcmd.user_config(repo, key) for key in ("user.name", "user.email"))
    if not name or not email:
        raise NoIdentityError(
            "no git identity to sign off with (git config user.name/user.email is not set)",
            'set it: git config --global user.name "Your Name" && git config --global user.email you@example.org',
        )
    return f"{name} <{email}>"


def sign_off(message: str, identity: str) -> str:
    """The message with a `Signed-off-by:` trailer for identity (once), in its trailer block."""
    text = message.rstrip()
    line = f"Signed-off-by: {identity}"
    if line in text.splitlines():
        return text + "\n"
    paragraphs = text.split("\n\n")
    in_block = len(paragraphs) > 1 and all(TRAILER_LINE.match(x) for x in paragraphs[-1].splitlines())
    return text + ("\n" if in_block else "\n\n") + line + "\n"


def upstream_message(kit_message: str, identity: str) -> str:
    return sign_off(strip_kit_trailers(kit_message), identity)


def rewrite(repo: Path, base: str, commits: list[str], identity: str) -> list[str]:
    """commits recreated on base with upstream messages (same trees, same authors): objects only, no ref moves.
    Deterministic: the committer date is the author date, so preparing again gives the same ids."""
    name, email = identity[: identity.rindex(" <")], identity[identity.rindex(" <") + 2 : -1]
    parent, made = gitcmd.rev_parse(repo, base), []
    for commit in commits:
        an, ae, ad, tree, message = gitcmd.commit_format(repo, commit, "%an%x00%ae%x00%aI%x00%T%x00%B").split("\x00", 4)
        env = {"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": ad,
               "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_COMMITTER_DATE": ad}  # fmt: skip
        parent = gitcmd.commit_object(repo, tree, parent, upstream_message(message, identity), env)
        made.append(parent)
    return made


def build_branch(repo: Path, base: str, commits: list[str], identity: str, branch: str) -> list[str]:
    """rewrite(), then point branch at the last commit (at base when there is none)."""
    made = rewrite(repo, base, commits, identity)
    gitcmd.set_branch(repo, branch, made[-1] if made else base)
    return made


def message_parts(repo: Path, commit: str) -> tuple[str, str]:
    """(subject, body without trailers) of a commit."""
    subject = gitcmd.commit_format(repo, commit, "%s").strip()
    body = gitcmd.commit_format(repo, commit, "%b")
    paragraphs = body.strip().split("\n\n")
    if paragraphs and paragraphs[-1] and all(TRAILER_LINE.match(x) for x in paragraphs[-1].splitlines()):
        paragraphs = paragraphs[:-1]
    return subject, "\n\n".join(paragraphs).strip()
