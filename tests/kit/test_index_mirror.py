"""A user behind their own mirror: with `PIP_CONFIG_FILE=/dev/null PIP_INDEX_URL=<mirror>` and every
other route closed (HTTPS_PROXY to a port nothing listens on), `nox -s lint`, run as the README sets
it up (its venv's nox), installs the session's packages from the mirror. The mirror is a PEP 503
simple index served over loopback by Python's http.server, over real wheels of what the lint
session installs, downloaded once from the registry into pytest's cache."""

from __future__ import annotations

import hashlib
import html
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from conftest import KIT_ROOT, copy_kit, free_port

from scripts import kittools, pipindex
from scripts.checks import precommit
from scripts.pin import load_pin
from scripts.workspace import Workspace

pytestmark = pytest.mark.network  # the wheels come from the package registry, once

README_NOX = KIT_ROOT / ".venv" / "bin" / "nox"


def lint_packages() -> list[str]:
    """What `nox -s lint` installs: the session's pre-commit and pyyaml (noxfile.py gate_tools), then
    each hook env pre-commit makes for the release config, a registry package at its rev."""
    ws = Workspace(KIT_ROOT)
    table = precommit.load_table(ws.hook_packages)
    config = yaml.safe_load((ws.ci_dir / precommit.RELEASE_CONFIG).read_text(encoding="utf-8"))
    hooks = [
        f"{found.package}=={found.version(repo['rev'])}"
        for repo in config["repos"]
        if (found := table.find(repo["repo"]))
    ]
    # pre-commit installs a `repo: local` python hook as a placeholder package (`pip install .`),
    # whose isolated build takes setuptools from the index
    return [
        kittools.pinned("pre-commit", ws.kit_tools),
        kittools.pinned("pyyaml", ws.kit_tools),
        "setuptools",
        *hooks,
    ]


@pytest.fixture(scope="module")
def wheels(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheels (dependencies too) for this interpreter, downloaded once per set of pins."""
    wanted = lint_packages()
    pin = load_pin(Workspace(KIT_ROOT).pin_file)
    release = f"{pin.project}=={pin.version}"
    key = hashlib.sha256("\n".join([sys.version, release, *wanted]).encode()).hexdigest()[:16]
    cache = request.config.cache
    folder = (
        cache.mkdir(f"kit-mirror-{key}") if cache else tmp_path_factory.mktemp(f"kit-mirror-{key}")
    )
    stamp = folder / "complete"
    if not stamp.is_file():
        for old in folder.glob("*.whl"):
            old.unlink()
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "-d", str(folder)]
            + wanted,
            check=True,
            capture_output=True,
        )
        # the pinned release too, which apply fetches (its own dependencies are the legs')
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder), release],
            check=True,
            capture_output=True,
        )
        stamp.write_text("\n".join(wanted) + "\n", encoding="utf-8")
    return folder


def simple_index(root: Path, wheels: Path) -> list[str]:
    """root/simple/<project>/index.html (PEP 503, each link with its sha256) over copies of the
    wheels in root/files; the projects, normalized."""
    files = root / "files"
    files.mkdir(parents=True)
    projects: dict[str, list[Path]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        shutil.copy2(wheel, files / wheel.name)
        projects.setdefault(kittools.normalize(wheel.name.split("-")[0]), []).append(wheel)
    for project, found in projects.items():
        links = "".join(
            f'<a href="../../files/{html.escape(w.name)}#sha256='
            f'{hashlib.sha256(w.read_bytes()).hexdigest()}">{html.escape(w.name)}</a>\n'
            for w in found
        )
        page = root / "simple" / project / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n", encoding="utf-8")
    return sorted(projects)


class Mirror(ThreadingHTTPServer):
    requests: list[str]

    def handle_error(self, request: object, client_address: object) -> None:
        # uv closes a connection once it has read what it needs (a wheel's metadata): not a fault
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class Recording(SimpleHTTPRequestHandler):
    server: Mirror

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- the base's name
        pass


@pytest.fixture
def mirror(tmp_path: Path, wheels: Path) -> Iterator[tuple[str, Mirror, list[str]]]:
    root = tmp_path / "mirror"
    projects = simple_index(root, wheels)
    server = Mirror(("127.0.0.1", 0), partial(Recording, directory=str(root)))
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", server, projects
    finally:
        server.shutdown()
        server.server_close()


# The noxfile as it is, and one whose install() drops the index it was handed: the check bites.
DROPPED = ('"UV_COMPILE_BYTECODE": "1", **uv_index}', '"UV_COMPILE_BYTECODE": "1"}')


@pytest.mark.parametrize("handed", [True, False], ids=["handed", "dropped"])
def test_nox_lint_installs_from_the_users_mirror_and_nowhere_else(
    handed: bool, tmp_path: Path, mirror: tuple[str, Mirror, list[str]]
) -> None:
    url, server, projects = mirror
    assert README_NOX.is_file(), (
        "the README's venv is missing: python3 -m venv .venv && .venv/bin/pip install -r "
        "ci/kit-tools.txt"
    )
    kit = copy_kit(tmp_path / "kit", with_patches=True).root
    noxfile = (KIT_ROOT / "noxfile.py").read_text(encoding="utf-8")
    assert DROPPED[0] in noxfile
    (kit / "noxfile.py").write_text(
        noxfile if handed else noxfile.replace(*DROPPED), encoding="utf-8"
    )
    closed = f"http://127.0.0.1:{free_port()}"
    env = {
        # none of this machine's own index settings, nor the noxfile's of an outer session
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PIP_", "UV_"))
            and k not in (pipindex.PIP_PYTHON, "PRE_COMMIT_HOME")
        },
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": url,
        "HTTPS_PROXY": closed,
        "https_proxy": closed,
        # a cold uv cache: every wheel comes through the index, none from an earlier download
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
    }
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(name, None)
    done = subprocess.run(
        # with a checkout, lint runs pre-commit, whose hook envs install from the index too
        [str(README_NOX), "-s", *(("apply", "lint") if handed else ("lint",))],
        cwd=kit,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert "uv pip install" in output, output
    asked = {
        path.strip("/").split("/")[1] for path in server.requests if path.startswith("/simple/")
    }
    fetched = {path.rsplit("/", 1)[-1] for path in server.requests if path.startswith("/files/")}
    if not handed:
        # uv went to its default index, through the closed proxy: nothing was installed
        assert asked == fetched == set(), sorted(server.requests)
        assert "Connection refused" in output, output[-3000:]
        assert "nox > python -m scripts lint" not in output, output[-3000:]
        return
    # every project the session installs was asked of the mirror, and each wheel fetched from it
    assert set(projects) <= asked, (sorted(asked), output[-3000:])
    assert {p.name for p in (tmp_path / "mirror" / "files").iterdir()} == fetched, output[-3000:]
    # and lint judged the series with every hook env made
    assert done.returncode == 0, output[-3000:]
