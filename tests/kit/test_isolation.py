"""The guard that keeps tests out of the developer's .work (conftest.developers_work_untouched) bites."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import AUTHOR, KIT_AUTHOR, SPDX, Kit, clone, make_series, rope_with, work_snapshot

from scripts.gitcmd import git


def test_a_write_under_work_changes_the_snapshot_and_the_shared_parts_do_not(
    tmp_path: Path,
) -> None:
    work = tmp_path / ".work"
    (work / "records").mkdir(parents=True)
    (work / "envs" / "stock").mkdir(parents=True)
    (work / "records" / "e2e.json").write_text("{}", encoding="utf-8")
    before = work_snapshot(work)
    # shared: not the developer's work
    (work / "envs" / "stock" / "built").write_text("a cache", encoding="utf-8")
    (work / "records" / "kit").mkdir()
    # these tests' own report
    (work / "records" / "kit" / "junit.xml").write_text("<x/>", encoding="utf-8")
    assert work_snapshot(work) == before
    (work / "records" / "e2e.json").write_text('{"overwritten": true}', encoding="utf-8")
    (work / "evidence").mkdir()
    (work / "evidence" / "summary.md").write_text("new", encoding="utf-8")
    after = work_snapshot(work)
    assert set(after) - set(before) == {"evidence/summary.md"}
    assert after["records/e2e.json"] != before["records/e2e.json"]
    assert work_snapshot(tmp_path / "none") == {}


# ---- invariant 12: the user's environment never changes what the kit writes or finds
# ------------------------ Each row is a setting a user may have (variables, files under their HOME
# or config home, a TMPDIR holding tool configs): under it, apply --force, refresh and lint must
# write the same patches/ bytes and report the same findings as under a clean environment. Add a row
# per new member of the class: (id, variables, files), where a file's path starts with "home/" (the
# user's HOME), "config/" (their XDG_CONFIG_HOME) or "tmp/" (their TMPDIR).

# a user site under PYTHONUSERBASE (the leg pins are for Python 3.11)
SITE = "lib/python3.11/site-packages"

HOSTILE: list[tuple[str, dict[str, str], dict[str, str]]] = [
    ("GIT_DIFF_OPTS", {"GIT_DIFF_OPTS": "--unified=1"}, {}),
    ("GIT_EXTERNAL_DIFF", {"GIT_EXTERNAL_DIFF": "echo changed"}, {}),
    (
        "GIT_CONFIG_PARAMETERS",
        {"GIT_CONFIG_PARAMETERS": "'diff.context'='1' 'core.autocrlf'='true'"},
        {},
    ),
    (
        "GIT_CONFIG_COUNT",
        {
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": "diff.noprefix",
            "GIT_CONFIG_VALUE_0": "true",
            "GIT_CONFIG_KEY_1": "core.abbrev",
            "GIT_CONFIG_VALUE_1": "7",
        },
        {},
    ),
    (
        "GIT_CONFIG_GLOBAL",
        {"GIT_CONFIG_GLOBAL": "{home}/other.gitconfig"},
        {
            "home/other.gitconfig": "[diff]\n\tcontext = 1\n\tsuppressBlankEmpty = true\n[core]\n\tautocrlf = true\n"
        },
    ),
    (
        "home-gitconfig",
        {},
        {"home/.gitconfig": "[diff]\n\tcontext = 5\n[format]\n\tsignature = mine\n"},
    ),
    ("xdg-attributes-diff-python", {}, {"config/git/attributes": "*.py diff=python\n"}),
    ("xdg-attributes-yaml-binary", {}, {"config/git/attributes": "*.yaml -diff\n"}),
    (
        "xdg-attributes-crlf",
        {},
        {"config/git/attributes": "*.py text eol=crlf\n*.yaml text eol=crlf\n"},
    ),
    # an empty XDG_CONFIG_HOME: git reads HOME/.config instead
    ("home-attributes", {"XDG_CONFIG_HOME": ""}, {"home/.config/git/attributes": "* -diff\n"}),
    (
        "xdg-config-core",
        {},
        {"config/git/config": "[core]\n\tautocrlf = true\n[diff]\n\tcontext = 0\n"},
    ),
    ("GIT_ATTR_SOURCE", {"GIT_ATTR_SOURCE": "HEAD~1"}, {}),
    ("GIT_EXEC_PATH", {"GIT_EXEC_PATH": "{home}"}, {}),
    ("GIT_TRACE", {"GIT_TRACE": "1", "GIT_TRACE_SETUP": "1"}, {}),
    (
        "GIT_NOTES_REF",
        {"GIT_NOTES_REF": "refs/notes/commits", "GIT_NOTES_DISPLAY_REF": "refs/notes/*"},
        {},
    ),
    (
        "locale-and-tz",
        {"LANG": "de_DE.UTF-8", "LC_ALL": "de_DE.UTF-8", "LANGUAGE": "de", "TZ": "Asia/Kolkata"},
        {},
    ),
    (
        "C-locale-no-utf8",
        {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"},
        {},
    ),
    (
        "PYTHONPATH-shadows-a-hook",
        {"PYTHONPATH": "{home}/py"},
        {  # the hook's console script would import these
            "home/py/pre_commit_hooks/__init__.py": "",
            "home/py/pre_commit_hooks/trailing_whitespace_fixer.py": "def main(argv=None):\n    return 0\n",
        },
    ),
    (
        "PYTHONUSERBASE-shadows-a-hook",
        {"PYTHONUSERBASE": "{home}/user"},
        {
            f"home/user/{SITE}/pre_commit_hooks/__init__.py": "",
            f"home/user/{SITE}/pre_commit_hooks/trailing_whitespace_fixer.py": "def main(a=0):\n  return 0\n",
        },
    ),
    (
        "colour-and-terminal",
        {"FORCE_COLOR": "1", "CLICOLOR_FORCE": "1", "TERM": "xterm-256color", "COLUMNS": "20"},
        {},
    ),
    (
        "GIT_DIR-elsewhere",
        {"GIT_DIR": "{home}", "GIT_WORK_TREE": "{tmp}", "GIT_INDEX_FILE": "{tmp}/index"},
        {},
    ),
    ("PYTHONWARNINGS", {"PYTHONWARNINGS": "error", "PYTHONDEVMODE": "1"}, {}),
    (
        "RUFF-variables",
        {"RUFF_OUTPUT_FORMAT": "github", "RUFF_NO_CACHE": "false", "RUFF_CACHE_DIR": "{home}/rc"},
        {},
    ),
    (
        "ruff-user-config",
        {},
        {"config/ruff/ruff.toml": "line-length = 20\n[lint]\nselect = ['ALL']\n"},
    ),
    (
        "tool-configs-in-TMPDIR",
        {"TMPDIR": "{tmp}"},
        {
            "tmp/_typos.toml": "[default.extend-words]\nteh = 'teh'\n",
            "tmp/ruff.toml": "[lint]\nselect = ['ALL']\n",
            "tmp/pyproject.toml": "[tool.ruff.lint]\nselect = ['ALL']\n"
            "[tool.typos.default.extend-words]\nteh = 'teh'\n",
        },
    ),
]

# A series with findings (a typo, trailing white space, an unused import) and a YAML file, so that a
# row that changed hunk headers, context, binary-ness, line endings or a hook's config would show in
# the bytes or findings.
ENV_SERIES = [
    (
        {"vllm_omni/layers/rope.py": rope_with({5: "def rope(x):", 30: "    return teh  "})},
        "[NPU] Rope",
        "rope",
    ),
    (
        {
            "vllm_omni/npu.yaml": "mode: npu\ncards:  4\n",
            "vllm_omni/npu.py": SPDX + "import os\n\nx = 'teh'\n",
        },
        "[NPU] Config",
        "npu-config",
    ),
]


@dataclass(frozen=True)
class Baseline:
    kit: Kit
    patches: dict[str, bytes]
    lint: tuple[int, str]


def patch_bytes(kit: Kit) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(kit.patches.iterdir())}


def spawned_lint(kit: Kit, env: dict[str, str]) -> tuple[int, str]:
    """lint as the user runs it (a process of its own, their environment), its output with the kit's
    path cut."""
    proc = kit.spawn("lint", env=env)
    # what pre-commit's store held before (a hook env made now) is progress, not a finding
    said = [
        line
        for line in (proc.stdout + proc.stderr).splitlines(keepends=True)
        if "pre-commit made the hook env" not in line
    ]
    return proc.returncode, "".join(said).replace(str(kit.root), "KIT")


def assert_same_output(kit: Kit, env: dict[str, str], baseline: Baseline) -> None:
    """apply --force and refresh succeed under env, and patches/ and lint's findings are the baseline's."""
    for command in ("apply --force", "refresh"):
        proc = kit.spawn(*command.split(), env=env)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (
            command,
            proc.stdout,
            proc.stderr,
        )
    assert patch_bytes(kit) == baseline.patches
    assert spawned_lint(kit, env) == baseline.lint


@pytest.fixture(scope="session")
def env_baseline(small_kit_template: Kit, tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    kit = clone(small_kit_template, tmp_path_factory.mktemp("env-kit") / "kit")
    make_series(kit, ENV_SERIES)
    return Baseline(kit, patch_bytes(kit), spawned_lint(kit, {}))


def hostile(tmp_path: Path, variables: dict[str, str], files: dict[str, str]) -> dict[str, str]:
    """The row's environment: its files written under a HOME, config home and TMPDIR of its own."""
    where = {"home": tmp_path / "home", "config": tmp_path / "config", "tmp": tmp_path / "tmp"}
    for folder in where.values():
        folder.mkdir(parents=True)
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    env = {"HOME": str(where["home"]), "XDG_CONFIG_HOME": str(where["config"])}
    env |= {k: v.format(**{k2: str(p) for k2, p in where.items()}) for k, v in variables.items()}
    return env


@pytest.mark.parametrize(
    ("variables", "files"), [row[1:] for row in HOSTILE], ids=[row[0] for row in HOSTILE]
)
def test_the_users_environment_changes_no_byte_and_no_finding(
    env_baseline: Baseline, tmp_path: Path, variables: dict[str, str], files: dict[str, str]
) -> None:
    kit = clone(env_baseline.kit, tmp_path / "kit")
    env = hostile(tmp_path, variables, files)
    assert_same_output(kit, env, env_baseline)


# Rows whose setting changes what a plain git writes: each proves its row is hostile (the table
# bites), the kit's git alone being isolated from it.
CHANGES_PLAIN_GIT = (
    "GIT_DIFF_OPTS",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_GLOBAL",
    "home-gitconfig",
    "xdg-attributes-diff-python",
    "xdg-attributes-yaml-binary",
    "home-attributes",
    "xdg-config-core",
)


@pytest.mark.parametrize("row", CHANGES_PLAIN_GIT)
def test_each_git_row_changes_what_a_plain_git_writes(
    env_baseline: Baseline, tmp_path: Path, row: str
) -> None:
    _, variables, files = next(r for r in HOSTILE if r[0] == row)
    clean = {**os.environ, **hostile(tmp_path / "clean", {}, {})}
    users = {**os.environ, **hostile(tmp_path / "users", variables, files)}
    argv = ["git", "format-patch", "--stdout", "pristine..HEAD"]
    outputs = [
        subprocess.run(
            argv, cwd=env_baseline.kit.checkout, env=env, capture_output=True, check=True
        ).stdout
        for env in (clean, users)
    ]
    assert outputs[0] != outputs[1]


# ---- the reverse: what grants access is honoured (a CI container whose checkout another uid owns)
# ----------

NOBODY = 65534


def chown_tree(top: Path, uid: int) -> None:
    for folder, dirs, files in os.walk(top):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.lchown(name, uid, uid)


def refusal(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    """One line `kit: error: <what> -- <fix>` holding needle, exit 2, no traceback."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )
    assert (
        len(lines) == 1
        and lines[0].startswith("kit: error: ")
        and " -- " in lines[0]
        and needle in lines[0]
    ), lines


@pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a checkout to another uid needs root (CI runs as root)"
)
def test_a_checkout_another_user_owns_needs_the_users_safe_directory(
    env_baseline: Baseline, tmp_path: Path
) -> None:
    kit = clone(env_baseline.kit, tmp_path / "kit")
    chown_tree(kit.checkout, NOBODY)
    env = hostile(tmp_path, {}, {})
    proc = kit.spawn("refresh", env=env)
    refusal(proc, f"git config --global --add safe.directory {kit.checkout}")
    assert patch_bytes(kit) == env_baseline.patches
    (tmp_path / "home" / ".gitconfig").write_text(
        f"[safe]\n\tdirectory = {kit.checkout}\n", encoding="utf-8"
    )
    assert_same_output(kit, env, env_baseline)


PR_SERIES = [
    (
        {
            "vllm_omni/attn.py": 'def attend(q):\n    if q.device.type == "npu":\n        return q * 2\n    return q\n'
        },
        "[NPU] Attend on NPU",
        "npu-attend",
    )
]
COVER = "[NPU] Attend on Ascend NPU\n\nAttention takes the CPU path on Ascend; this gives NPU its own branch.\n"


@pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a checkout to another uid needs root (CI runs as root)"
)
def test_pr_records_the_kit_commit_of_a_kit_repository_another_user_owns(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    make_series(small_kit, PR_SERIES, author=KIT_AUTHOR)
    root = small_kit.root
    (small_kit.patches / "cover.md").write_text(COVER, encoding="utf-8")
    (root / ".gitignore").write_text("/.work/\n", encoding="utf-8")
    git("init", "-q", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-qm", "kit with series v1", cwd=root, env=AUTHOR)
    head = git("rev-parse", "HEAD", cwd=root).strip()
    os.chown(root, NOBODY, NOBODY)  # the kit's root only: the checkout under .work is the user's
    refusal(small_kit.run("pr", env=identity), f"safe.directory {root}")
    assert not (small_kit.patches / "revisions.toml").exists()
    config = Path(identity["GIT_CONFIG_GLOBAL"])
    config.write_text(
        config.read_text(encoding="utf-8") + f"[safe]\n\tdirectory = {root}\n", encoding="utf-8"
    )
    proc = small_kit.run("pr", env=identity)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f'kit_commit = "{head}"' in (small_kit.patches / "revisions.toml").read_text(
        encoding="utf-8"
    )


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (".git/info/attributes", "*.py diff=python\n"),
        (".git/info/grafts", "0000000000000000000000000000000000000000\n"),
    ],
)
def test_a_checkouts_own_info_files_are_refused_by_name(
    env_baseline: Baseline, tmp_path: Path, name: str, text: str
) -> None:
    """git reads .git/info/attributes and grafts besides the commits, and no option turns them off:
    refused."""
    kit = clone(env_baseline.kit, tmp_path / "kit")
    (kit.checkout / name).write_text(text, encoding="utf-8")
    for command in ("refresh", "lint"):
        refusal(kit.spawn(command), name)
        assert (
            patch_bytes(kit) == env_baseline.patches
            and (kit.checkout / name).read_text(encoding="utf-8") == text
        )


def test_pr_with_a_non_ascii_name_under_the_c_locale(small_kit: Kit, tmp_path: Path) -> None:
    """Every text the kit reads from or writes to a child is UTF-8, whatever the locale says."""
    make_series(small_kit, PR_SERIES, author=KIT_AUTHOR)
    (small_kit.patches / "cover.md").write_text(COVER, encoding="utf-8")
    config = tmp_path / "gitconfig"
    config.write_text(
        "[user]\n\tname = Zoë Ångström-Łukasz\n\temail = zoe@example.org\n", encoding="utf-8"
    )
    c_locale = {
        "LC_ALL": "C",
        "LANG": "C",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONUTF8": "0",
        "PYTHONIOENCODING": "",
    }
    proc = small_kit.spawn("pr", env={"GIT_CONFIG_GLOBAL": str(config), **c_locale})
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )
    body = small_kit.root / ".work/pr/v1/1-series/0001-npu-attend.patch"
    assert "Signed-off-by: Zoë Ångström-Łukasz <zoe@example.org>" in body.read_text(
        encoding="utf-8"
    )
