"""What the package registry publishes about a release file: its sha256.

A new pin's digest must come from the registry's own index, never only from a
file on disk (a cached file may be truncated or stale). The indexes are the
ones pip installs from (scripts/pipindex.py: the environment, PIP_CONFIG_FILE,
the site, user and global pip.conf), else PyPI. Each is read as a simple
repository index: the JSON form (PEP 691) where the server offers it, else the HTML form (PEP 503), whose
links carry `#sha256=...`. `file://` indexes work too (tests, mirrors).
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from scripts import pipindex
from scripts.errors import KitError
from scripts.kittools import dist_name, normalize

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


class RegistryError(KitError):
    """The registry's index cannot be read, or does not list the file."""


def configured_indexes() -> list[str]:
    """The indexes pip installs from, as scripts/pipindex.py reads them (the main one, else PyPI;
    then the extra ones)."""
    return pipindex.indexes(pipindex.read(os.environ))


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def digests_from_page(body: str, content_type: str) -> dict[str, str]:
    """{file name: sha256} of a project page of a simple index, JSON or HTML."""
    if content_type.split(";")[0].strip() == JSON_TYPE:
        files = json.loads(body).get("files", [])
        return {
            f["filename"]: f["hashes"]["sha256"] for f in files if "sha256" in f.get("hashes", {})
        }
    links = _Links()
    links.feed(body)
    out = {}
    for href in links.hrefs:
        url, _, fragment = href.partition("#")
        if fragment.startswith("sha256="):
            out[urllib.parse.unquote(url.rsplit("/", 1)[-1])] = fragment[len("sha256=") :].lower()
    return out


def read_page(url: str) -> tuple[str, str]:
    """(body, content type) of an index page; a file:// folder is read through its index.html."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        folder = Path(urllib.request.url2pathname(parsed.path))
        page = folder / "index.html" if folder.is_dir() else folder
        return page.read_text(encoding="utf-8"), "text/html"
    request = urllib.request.Request(url, headers={"Accept": f"{JSON_TYPE}, text/html;q=0.1"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read().decode("utf-8"), response.headers.get("Content-Type", "text/html")


def project_page(
    project: str, indexes: list[str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """({file name: sha256} from the first index that lists project, what was tried where none did)."""
    tried = []
    for base in indexes or configured_indexes():
        url = f"{base}/{normalize(project)}/"
        try:
            body, content_type = read_page(url)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            tried.append(f"{url}: {exc}")
            continue
        files = digests_from_page(body, content_type)
        if files:
            return files, tried
        tried.append(f"{url}: no files with a sha256")
    return {}, tried


def published_sha256(project: str, filename: str, indexes: list[str] | None = None) -> str:
    """The sha256 the registry publishes for one file of project."""
    files, tried = project_page(project, indexes)
    digest = files.get(filename, "")
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        where = "; ".join(tried) or f"the index lists {len(files)} other file(s)"
        raise RegistryError(
            f"no package index publishes a sha256 for {filename} ({where})",
            "check that the registry is reachable and lists the release (pip config debug shows "
            "where pip's index settings come from)",
        )
    return digest


def newest_release(project: str, indexes: list[str] | None = None) -> str:
    """The highest final release (no rc/dev) with a wheel on the index."""
    files, tried = project_page(project, indexes)
    prefix = dist_name(project) + "-"
    found = [
        m[1]
        for name in files
        if (m := re.match(rf"^{re.escape(prefix)}(\d+(?:\.\d+)*)-.*\.whl$", name))
    ]
    if not found:
        raise RegistryError(
            f"no release wheel of {project} on the package index ({'; '.join(tried) or 'none'})",
            "name the release instead of latest",
        )
    return max(found, key=lambda v: tuple(int(x) for x in v.split(".")))
