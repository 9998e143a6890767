"""The user's package index, read by the pinned pip with pip's own precedence (scripts/pipindex.py),
and what it hands to pip and uv. Every row runs the real pip on real files: the environment, the file
PIP_CONFIG_FILE names, the site file (the venv's pip.conf), the user's (~/.config/pip/pip.conf,
~/.pip/pip.conf) and the global one (XDG_CONFIG_DIRS, as /etc/xdg)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import KIT_ROOT, copy_kit

from scripts import kittools, pipindex
from scripts.errors import KitError
from scripts.legs import legenv

PIN = kittools.version("pip", KIT_ROOT / "ci" / "kit-tools.txt")

# Where a row's file lies: the row's HOME, its XDG_CONFIG_DIRS, the site venv, or a file of its own.
WHERE = {
    "user": "home/.config/pip/pip.conf",
    "legacy-user": "home/.pip/pip.conf",
    "global": "xdg/pip/pip.conf",
    "config-file": "mine.conf",
}

ROWS = {
    "environment only": ({}, {"PIP_INDEX_URL": "http://env.example/simple"}, "http://env.example"),
    "PIP_CONFIG_FILE beats site and user (pip then reads no user file)": (
        {
            "config-file": "[global]\nindex-url = http://file.example/simple\n",
            "site": "[global]\nindex-url = http://site.example/simple\n",
            "user": "[global]\nindex-url = http://user.example/simple\n",
        },
        {"PIP_CONFIG_FILE": "{tmp}/mine.conf"},
        "http://file.example",
    ),
    "site beats user": (
        {
            "site": "[global]\nindex-url = http://site.example/simple\n",
            "user": "[global]\nindex-url = http://user.example/simple\n",
        },
        {},
        "http://site.example",
    ),
    "user beats global": (
        {
            "user": "[global]\nindex-url = http://user.example/simple\n",
            "global": "[global]\nindex-url = http://global.example/simple\n",
        },
        {},
        "http://user.example",
    ),
    "the legacy user file": (
        {"legacy-user": "[global]\nindex-url = http://legacy.example/simple\n"},
        {},
        "http://legacy.example",
    ),
    "global alone": (
        {"global": "[global]\nindex-url = http://global.example/simple\n"},
        {},
        "http://global.example",
    ),
    "[install] beats [global] in a file": (
        {
            "user": "[global]\nindex-url = http://g.example/simple\n"
            "[install]\nindex-url = http://i.example/simple\n"
        },
        {},
        "http://i.example",
    ),
    # pip merges each section across the files first: a lower file's [install] still beats a
    # higher file's [global] for `pip install`
    "[install] of the global file beats [global] of the user file": (
        {
            "user": "[global]\nindex-url = http://user.example/simple\n",
            "global": "[install]\nindex-url = http://global-install.example/simple\n",
        },
        {},
        "http://global-install.example",
    ),
    "the environment beats [install]": (
        {"user": "[install]\nindex-url = http://i.example/simple\n"},
        {"PIP_INDEX_URL": "http://env.example/simple"},
        "http://env.example",
    ),
    "an empty variable leaves the file's value (pip skips empty values)": (
        {"user": "[global]\nindex-url = http://user.example/simple\n"},
        {"PIP_INDEX_URL": ""},
        "http://user.example",
    ),
    "PIP_CONFIG_FILE=/dev/null: no file at all": (
        {
            "site": "[global]\nindex-url = http://site.example/simple\n",
            "user": "[global]\nindex-url = http://user.example/simple\ncert = /u.pem\n",
            "global": "[global]\nindex-url = http://global.example/simple\n",
        },
        {"PIP_CONFIG_FILE": os.devnull},
        "",
    ),
}


@pytest.fixture(scope="module")
def site_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of its own whose pip is the pin (this interpreter's, linked in): its pip.conf is the
    site file a row writes, and the reader finds it as the noxfile names its own (KIT_PIP_PYTHON)."""
    venv = tmp_path_factory.mktemp("site") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    pip = importlib.metadata.distribution("pip")
    assert pip.version == PIN, f"this interpreter's pip is {pip.version}, the pin {PIN}"
    source = Path(str(pip.locate_file("pip")))
    (site / "pip").symlink_to(source)
    (site / f"pip-{PIN}.dist-info").symlink_to(source.parent / f"pip-{PIN}.dist-info")
    return venv / "bin" / "python"


def row_environ(tmp: Path, site_python: Path, env: dict[str, str]) -> dict[str, str]:
    """Only what the row sets: none of this machine's own pip settings reach pip."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp / "home"),
        "XDG_CONFIG_DIRS": str(tmp / "xdg"),
        pipindex.PIP_PYTHON: str(site_python),
        **{k: v.format(tmp=tmp) for k, v in env.items()},
    }


def write_files(tmp: Path, site_python: Path, files: dict[str, str]) -> None:
    site_file = site_python.parent.parent / "pip.conf"
    site_file.unlink(missing_ok=True)
    for where, text in files.items():
        path = site_file if where == "site" else tmp / WHERE[where]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(("files", "env", "index"), ROWS.values(), ids=ROWS.keys())
def test_the_index_pip_installs_from_is_the_one_the_kit_reads(
    files: dict[str, str], env: dict[str, str], index: str, tmp_path: Path, site_python: Path
) -> None:
    write_files(tmp_path, site_python, files)
    settings = pipindex.read(row_environ(tmp_path, site_python, env))
    assert settings.index_url == (f"{index}/simple" if index else "")
    if env.get("PIP_CONFIG_FILE") == os.devnull:
        assert settings == pipindex.IndexSettings()


def test_extras_find_links_trusted_hosts_and_cert_from_files_and_the_environment(
    tmp_path: Path, site_python: Path
) -> None:
    write_files(
        tmp_path,
        site_python,
        {
            "user": "[global]\nextra-index-url =\n    http://a.example/simple\n"
            "    http://b.example/simple\nfind-links = /srv/wheels\n"
            "trusted-host = a.example\ncert = /user.pem\n",
            "global": "[global]\ncert = /global.pem\n",
        },
    )
    settings = pipindex.read(row_environ(tmp_path, site_python, {}))
    assert settings == pipindex.IndexSettings(
        index_url="",
        extra_index_urls=("http://a.example/simple", "http://b.example/simple"),
        find_links=("/srv/wheels",),
        trusted_hosts=("a.example",),
        cert="/user.pem",
    )
    # pip's list options from the environment replace the files' lists, they do not add to them
    env = {"PIP_EXTRA_INDEX_URL": "http://c.example/simple", "PIP_FIND_LINKS": "/w1 /w2"}
    settings = pipindex.read(row_environ(tmp_path, site_python, env))
    assert settings.extra_index_urls == ("http://c.example/simple",)
    assert settings.find_links == ("/w1", "/w2")


FULL = pipindex.IndexSettings(
    index_url="http://mirror.example:8080/simple",
    extra_index_urls=("http://a.example/simple", "http://b.example/simple"),
    find_links=("/w1", "/w2"),
    trusted_hosts=("mirror.example:8080",),
    cert="/mirror.pem",
)


def test_what_pip_and_uv_are_handed_and_uvs_own_settings_winning(tmp_path: Path) -> None:
    assert pipindex.pip_env(FULL) == {
        "PIP_INDEX_URL": "http://mirror.example:8080/simple",
        "PIP_EXTRA_INDEX_URL": "http://a.example/simple http://b.example/simple",
        "PIP_FIND_LINKS": "/w1 /w2",
        "PIP_TRUSTED_HOST": "mirror.example:8080",
        "PIP_CERT": "/mirror.pem",
    }
    home = {"HOME": str(tmp_path)}
    assert pipindex.uv_env(FULL, home) == {
        "UV_DEFAULT_INDEX": "http://mirror.example:8080/simple",
        "UV_INDEX": "http://a.example/simple http://b.example/simple",
        "UV_FIND_LINKS": "/w1,/w2",
        "UV_INSECURE_HOST": "mirror.example:8080",
        "UV_INDEX_STRATEGY": "unsafe-best-match",
        "SSL_CERT_FILE": "/mirror.pem",
    }
    # only the main index: uv's default strategy is pip's then
    main = pipindex.IndexSettings(index_url="http://m.example/simple")
    assert pipindex.uv_env(main, home) == {"UV_DEFAULT_INDEX": "http://m.example/simple"}
    # uv configured through a variable or a uv.toml: uv's own settings win; a cert set stays
    mine = {**home, "UV_INDEX_URL": "http://mine.example/simple", "SSL_CERT_FILE": "/mine.pem"}
    assert pipindex.uv_env(FULL, mine) == {}
    assert pipindex.uv_index_args(FULL, mine) == []
    (tmp_path / ".config" / "uv").mkdir(parents=True)
    (tmp_path / ".config" / "uv" / "uv.toml").write_text('index-url = "http://t.example/simple"\n')
    assert pipindex.uv_env(FULL, home) == {"SSL_CERT_FILE": "/mirror.pem"}
    assert pipindex.uv_env(FULL, {**home, "UV_NO_CONFIG": "1"})["UV_DEFAULT_INDEX"]
    # uv called with options: the same, or the main index alone (new pins never depend on extras)
    assert pipindex.uv_index_args(FULL, {}) == [
        *("--index-url", "http://mirror.example:8080/simple"),
        *("--extra-index-url", "http://a.example/simple"),
        *("--extra-index-url", "http://b.example/simple"),
        *("--find-links", "/w1", "--find-links", "/w2"),
        *("--allow-insecure-host", "mirror.example:8080"),
        *("--index-strategy", "unsafe-best-match"),
    ]
    assert pipindex.uv_index_args(FULL, {}, extras=False) == [
        "--index-url",
        "http://mirror.example:8080/simple",
    ]
    # registry look-ups: the main index (else PyPI), then the extras
    assert pipindex.indexes(FULL) == [
        "http://mirror.example:8080/simple",
        "http://a.example/simple",
        "http://b.example/simple",
    ]
    assert pipindex.indexes(pipindex.IndexSettings()) == ["https://pypi.org/simple"]


def wheel_folder(where: Path, name: str, version: str) -> Path:
    """A folder holding one tiny real wheel (find-links)."""
    where.mkdir(parents=True)
    dist = f"{name}-{version}.dist-info"
    record = f"{dist}/METADATA,,\n{dist}/WHEEL,,\n{dist}/RECORD,,\n"
    with zipfile.ZipFile(where / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        whl.writestr(
            f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        whl.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        whl.writestr(f"{dist}/RECORD", record)
    return where


def test_uv_takes_every_find_links_folder_it_is_handed(tmp_path: Path) -> None:
    """UV_FIND_LINKS is split at commas (the other lists at spaces): a real uv, offline, finds a wheel
    in each of two folders."""
    uv = legenv.uv_executable()
    assert uv is not None, "uv is missing: pip install -r ci/kit-tools.txt"
    one, two = (
        wheel_folder(tmp_path / "one", "kitone", "1.0"),
        wheel_folder(tmp_path / "two", "kittwo", "1.0"),
    )
    settings = pipindex.IndexSettings(find_links=(str(one), str(two)))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "UV_NO_CONFIG": "1",
        "UV_CACHE_DIR": str(tmp_path / "cache"),
        **pipindex.uv_env(settings, {"HOME": str(tmp_path)}),
    }
    subprocess.run([uv[0], "venv", "--quiet", str(tmp_path / "v")], check=True, env=env)
    argv = [uv[0], "pip", "install", "--offline", "--no-index", "--python", str(tmp_path / "v")]
    done = subprocess.run([*argv, "kitone", "kittwo"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    # the check bites: the same two folders joined with a space are one path uv cannot find
    env["UV_FIND_LINKS"] = f"{one} {two}"
    done = subprocess.run([*argv, "--reinstall", "kitone"], capture_output=True, text=True, env=env)
    assert done.returncode != 0


def test_a_venv_without_pip_reads_with_the_pinned_pip_of_the_kits_python(tmp_path: Path) -> None:
    """A uv-made session venv has no pip: the reader there runs the pip the noxfile names
    (KIT_PIP_PYTHON: the interpreter running nox), with the same result."""
    uv = legenv.uv_executable()
    assert uv is not None, "uv is missing: pip install -r ci/kit-tools.txt"
    bare = tmp_path / "bare"
    subprocess.run([uv[0], "venv", "--quiet", "--python", sys.executable, str(bare)], check=True)
    probe = "import os; from scripts import pipindex; print(pipindex.read(os.environ).index_url)"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": str(KIT_ROOT),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "http://mirror.example/simple",
        pipindex.PIP_PYTHON: sys.executable,
    }
    python = str(bare / "bin" / "python")
    assert subprocess.run([python, "-c", "import pip"], capture_output=True).returncode != 0
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "http://mirror.example/simple", done.stderr


@pytest.mark.network  # uv fetches the pinned pip from the package registry (once into its cache)
def test_with_no_pinned_pip_anywhere_uv_runs_the_pin(tmp_path: Path) -> None:
    """Outside nox, in a venv without pip and a kit without the README's venv: uv runs the pinned pip
    in a tool env of its own (fetched from the index the environment names)."""
    uv = legenv.uv_executable()
    assert uv is not None, "uv is missing: pip install -r ci/kit-tools.txt"
    kit = copy_kit(tmp_path / "kit", with_patches=False).root
    bare = tmp_path / "bare"
    subprocess.run([uv[0], "venv", "--quiet", "--python", sys.executable, str(bare)], check=True)
    probe = (
        "import os; from scripts import pipindex; print(pipindex.pip_command(os.environ)[1:3]); "
        "print(pipindex.read(os.environ).index_url)"
    )
    env = {
        **{k: v for k, v in os.environ.items() if k != pipindex.PIP_PYTHON},
        "PATH": f"{Path(uv[0]).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(kit),
        "PIP_INDEX_URL": "https://pypi.org/simple",
    }
    done = subprocess.run(
        [str(bare / "bin" / "python"), "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.stdout.splitlines() == ["['tool', 'run']", "https://pypi.org/simple"], done.stderr


def test_no_pip_and_no_uv_is_one_line(tmp_path: Path) -> None:
    kit = copy_kit(tmp_path / "kit", with_patches=False).root
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    probe = "import os; from scripts import pipindex; pipindex.read(os.environ)"
    front = f"import sys; from scripts.errors import KitError\ntry:\n    {probe}\nexcept KitError as e:\n    print(e)"
    env = {"PATH": str(tmp_path / "nowhere"), "HOME": str(tmp_path), "PYTHONPATH": str(kit)}
    done = subprocess.run(
        [str(bare / "bin" / "python"), "-c", front],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.stdout.startswith(f"pip=={PIN} is not installed for "), done.stdout + done.stderr
    assert " -- run the kit from the README's venv" in done.stdout
    assert shutil.which("uv", path=env["PATH"]) is None


README_NOX = KIT_ROOT / ".venv" / "bin" / "nox"


def test_a_broken_pip_conf_is_one_line_from_the_reader_and_from_nox(tmp_path: Path) -> None:
    """pip refuses a file without a section header; the kit says so in one line naming the file,
    and nox's sessions stop before any install (no traceback)."""
    broken = tmp_path / "pip.conf"
    broken.write_text("index-url = http://mirror.example/simple\n", encoding="utf-8")
    # a PIP_CONFIG_FILE that exists: pip reads no user file beside it
    env = {**os.environ, "PIP_CONFIG_FILE": str(broken)}
    env.pop(pipindex.PIP_PYTHON, None)
    with pytest.raises(KitError) as refused:
        pipindex.read(env)
    assert str(refused.value).startswith("pip config debug failed (exit 2): ")
    assert str(broken) in str(refused.value) and "\n" not in str(refused.value)
    assert README_NOX.is_file(), "the README's venv is missing: python3 -m venv .venv && ..."
    kit = copy_kit(tmp_path / "kit", with_patches=True).root
    shutil.copy2(KIT_ROOT / "noxfile.py", kit / "noxfile.py")
    done = subprocess.run(
        [str(README_NOX), "-s", "lint"], cwd=kit, env=env, capture_output=True, text=True
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output
    assert "kit: error: pip config debug failed (exit 2): " in output, output
    assert "pip install" not in output, output
