"""What the package registry publishes about a release file: its sha256.

A new pin's digest must come from the registry's own index, never only from a
file on disk (a cached file may be truncated or stale). The index is the one
pip is configured with (`pip config list`: index-url, from a config file or
PIP_INDEX_URL), else PyPI. It is read as a simple repository index: the JSON
form (PEP 691) where the server offers it, else the HTML form (PEP 503), whose
links carry `#sha256=...`. `file://` indexes work too (tests, mirrors).
"""

from __future__ import annotations

import html.parser
import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from scripts.errors import KitError

PYPI_SIMPLE = "https://pypi.org/simple"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
INDEX_KEY = re.compile(r"^(?:[\w:]+)?\.index-url='(.*)'$")


class RegistryError(KitError):
    """The registry's index cannot be read, or does not list the file."""


def normalize(project: str) -> str:
    """The project's name as the simple index spells it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", project).lower()


def index_url_from_config(pip_config_list: str) -> str:
    """The index-url from `pip config list` output (the last one wins, as env overrides files), else PyPI."""
    found = [m[1] for line in pip_config_list.splitlines() if (m := INDEX_KEY.match(line.strip()))]
    return (found[-1] if found else PYPI_SIMPLE).rstrip("/")


def configured_index() -> str:
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    return index_url_from_config(proc.stdout if proc.returncode == 0 else "")


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
        return {f["filename"]: f["hashes"]["sha256"] for f in files if "sha256" in f.get("hashes", {})}
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


def published_sha256(project: str, filename: str, index: str | None = None) -> str:
    """The sha256 the registry publishes for one file of project."""
    base = index or configured_index()
    url = f"{base}/{normalize(project)}/"
    try:
        body, content_type = read_page(url)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        raise RegistryError(
            f"cannot read the package index page {url} ({exc})",
            "check that the registry is reachable (pip config list shows the index pip uses)",
        ) from exc
    digest = digests_from_page(body, content_type).get(filename)
    if not digest or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise RegistryError(
            f"the package index {base} publishes no sha256 for {filename}",
            "name a release the index lists with its digest, or point pip at an index that publishes digests",
        )
    return digest
