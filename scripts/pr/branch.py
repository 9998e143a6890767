"""The series as upstream sees it: the same trees, messages without the kit's
trailers, DCO-true authorship.

The DCO app on upstream's repository checks every commit of a PR for a `Signed-off-by:` whose email
is the commit author's. The kit's own identity (KIT_IDENTITY, the author of every patch the kit
applied) is not a person: the submitter carries those patches, so the upstream commit is authored
and signed off by the submitter, dated by the revision (patches/revisions.toml), which makes the ids
repeatable. A patch written by someone else (its `From:` is not the kit) keeps that author and must
already carry that author's own sign-off; the submitter's is added after it, as for any forwarded
patch."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from scripts import gitcmd
from scripts.errors import KitError
from scripts.series import strip_kit_trailers

TRAILER_LINE = re.compile(r"^[A-Za-z0-9-]+: \S")
SIGNED_OFF = re.compile(r"^Signed-off-by: (.*?) <([^<>]*)>\s*$", re.M)
KIT_EMAIL = gitcmd.KIT_IDENTITY["GIT_AUTHOR_EMAIL"]
# local@domain.tld, as the DCO app validates
DCO_EMAIL = re.compile(r"^[^@\s<>]+@[^@\s<>.]+(\.[^@\s<>.]+)+$")


class NoIdentityError(KitError):
    """The user has no git identity to sign off with."""


class DcoError(KitError):
    """A commit would fail upstream's DCO check."""


@dataclass(frozen=True)
class Signer:
    """Who sends the series upstream, and the date of the revision sent (ISO 8601, from
    patches/revisions.toml)."""

    identity: str  # `Name <email>`
    date: str

    @property
    def name(self) -> str:
        return self.identity[: self.identity.rindex(" <")]

    @property
    def email(self) -> str:
        return self.identity[self.identity.rindex(" <") + 2 : -1]


def user_identity(repo: Path) -> str:
    """`Name <email>` from the user's own git config (not the kit's isolated git), as seen from repo."""
    name, email = (gitcmd.user_config(repo, key) for key in ("user.name", "user.email"))
    if not name or not email:
        raise NoIdentityError(
            "no git identity to sign off with (git config user.name/user.email is not set)",
            'set it: git config --global user.name "Your Name" && git config --global user.email '
            "you@example.org",
        )
    if not DCO_EMAIL.match(email):
        raise NoIdentityError(
            f"git config user.email {email!r} is not an address upstream's DCO check accepts "
            "(it needs name@domain.tld, a domain with a dot)",
            "set the address you sign off with: git config --global user.email you@example.org",
        )
    if "<" in name or ">" in name or not name.strip():
        raise NoIdentityError(
            f"git config user.name {name!r} cannot be a Signed-off-by: name",
            'set it: git config --global user.name "Your Name"',
        )
    return f"{name} <{email}>"


def sign_off(message: str, identity: str) -> str:
    """The message with a `Signed-off-by:` trailer for identity (once), in its trailer block."""
    text = message.rstrip()
    line = f"Signed-off-by: {identity}"
    if line in text.splitlines():
        return text + "\n"
    paragraphs = text.split("\n\n")
    in_block = len(paragraphs) > 1 and all(
        TRAILER_LINE.match(x) for x in paragraphs[-1].splitlines()
    )
    return text + ("\n" if in_block else "\n\n") + line + "\n"


def upstream_message(kit_message: str, identity: str) -> str:
    return sign_off(strip_kit_trailers(kit_message), identity)


def dco_problem(author_email: str, message: str) -> str | None:
    """Why the DCO app would fail a commit by author_email with this message (None: it passes)."""
    emails = [m[2].strip().lower() for m in SIGNED_OFF.finditer(message)]
    if not emails:
        return "has no Signed-off-by: line"
    if author_email.strip().lower() not in emails:
        return f"is authored by <{author_email}> but signed off only by <{'>, <'.join(emails)}>"
    return None


def upstream_author(author: tuple[str, str, str], signer: Signer) -> tuple[str, str, str]:
    """(name, email, date) the upstream commit is authored with: the signer for the kit's own patches
    (the kit is not a person), the patch's own author (and date) for anything written by someone
    else."""
    return (signer.name, signer.email, signer.date) if author[1] == KIT_EMAIL else author


def rewrite(repo: Path, base: str, commits: list[str], signer: Signer) -> list[str]:
    """commits recreated on base as upstream gets them (same trees, upstream messages, DCO-true
    authors): objects only, no ref moves. Deterministic: dates come from the revision, so preparing
    it again gives the same ids. Refuses (DcoError, naming the commit) a commit upstream's DCO check
    would refuse."""
    parent, made = gitcmd.rev_parse(repo, base), []
    for commit in commits:
        an, ae, ad, tree, message = gitcmd.commit_format(
            repo, commit, "%an%x00%ae%x00%aI%x00%T%x00%B"
        ).split("\x00", 4)
        name, email, date = upstream_author((an, ae, ad), signer)
        text = upstream_message(message, signer.identity)
        if why := dco_problem(email, text):
            subject = text.split("\n", 1)[0]
            raise DcoError(
                f"commit '{subject}' {why}: upstream's DCO check would refuse it",
                f"a patch by {name} <{email}> needs their own 'Signed-off-by: {name} <{email}>' in "
                "its message "
                "(ask them for it; then refresh); or make it yours: git commit --amend "
                "--reset-author in the checkout",
            )
        env = {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_NAME": signer.name,
            "GIT_COMMITTER_EMAIL": signer.email,
            "GIT_COMMITTER_DATE": signer.date,
        }
        parent = gitcmd.commit_object(repo, tree, parent, text, env)
        made.append(parent)
    return made


def build_branch(
    repo: Path, base: str, commits: list[str], signer: Signer, branch: str
) -> list[str]:
    """rewrite(), then point branch at the last commit (at base when there is none)."""
    made = rewrite(repo, base, commits, signer)
    gitcmd.set_branch(repo, branch, made[-1] if made else base)
    return made


def message_parts(repo: Path, commit: str) -> tuple[str, str]:
    """(subject, body without trailers) of a commit."""
    subject = gitcmd.commit_format(repo, commit, "%s").strip()
    body = gitcmd.commit_format(repo, commit, "%b")
    paragraphs = body.strip().split("\n\n")
    if (
        paragraphs
        and paragraphs[-1]
        and all(TRAILER_LINE.match(x) for x in paragraphs[-1].splitlines())
    ):
        paragraphs = paragraphs[:-1]
    return subject, "\n\n".join(paragraphs).strip()
