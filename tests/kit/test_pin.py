"""The pin: sha256 verification before extraction, registry errors, the git source, the real 0.30.0
wheel."""

import shutil
from pathlib import Path

import pytest
from conftest import (
    AUTHOR,
    KIT_ROOT,
    SMALL_UPSTREAM,
    Kit,
    build_wheel,
    commit_patch,
    copy_kit,
    pin_toml,
)

from scripts import pin, worklock
from scripts.gitcmd import git
from scripts.pin import git_blob_id


def test_shipped_pin_is_vllm_omni_0_30_0_and_version_names_the_pin_and_takes_no_command(
    small_kit: Kit,
) -> None:
    shipped = pin.load_pin(KIT_ROOT / "patches" / "upstream.toml")
    assert (shipped.project, shipped.version, shipped.source) == ("vllm-omni", "0.30.0", "wheel")
    assert shipped.wheel_filename == "vllm_omni-0.30.0-py3-none-any.whl"
    assert (
        shipped.git_url == "https://github.com/vllm-project/vllm-omni"
        and shipped.git_tag == "v0.30.0"
    )
    done = small_kit.run("--version")
    assert (
        done.returncode == 0
        and done.stdout.startswith("vllm-omni NPU kit: ")
        and "(wheel)" in done.stdout
    )
    refused = small_kit.run("--version", "lint")
    assert refused.returncode == 2 and refused.stderr.startswith(
        "kit: error: --version takes no COMMAND"
    )


def test_a_pin_digest_the_cached_wheel_fails_names_both_and_keeps_the_wheel(small_kit: Kit) -> None:
    text = (small_kit.patches / "upstream.toml").read_text()
    digest = pin.parse_pin(text).wheel_sha256
    small_kit.write_pin(text.replace(digest, "0" * 64))
    proc = small_kit.run("apply")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    # the registry has no such small test wheel: the refetch fails, the error names both digests,
    # and the cached wheel stays where it was (it is only replaced by a download that passes)
    assert (
        f"the cached vllm_omni-0.1.0-py3-none-any.whl has sha256 {digest}, not the expected "
        f"{'0' * 64}" in proc.stderr
    )
    assert "could not download vllm-omni==0.1.0" in proc.stderr
    left = sorted(p.name for p in (small_kit.root / ".work" / "downloads").iterdir())
    # no set-aside file, no partial download
    assert left == [".lock", "vllm_omni-0.1.0-py3-none-any.whl"]
    assert not small_kit.checkout.exists()  # nothing extracted


def test_one_fetch_serves_a_release_of_unknown_file_name_and_its_cache(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "built").mkdir()
    wheel, digest = build_wheel(tmp_path / "built", SMALL_UPSTREAM)
    served = [wheel]

    def download(project: str, version: str, dest: Path) -> None:
        for w in served:
            (dest / w.name).write_bytes(wheel.read_bytes())

    monkeypatch.setattr("scripts.pin.pip_download", download)
    downloads, asked = tmp_path / "downloads", []

    def registry_digest(name: str) -> str:
        asked.append(name)
        return digest

    got = pin.fetch_verified("vllm-omni", "0.1.0", downloads, None, registry_digest)
    assert got == (downloads / wheel.name, digest) and asked == [wheel.name]
    served.clear()  # from now on the registry serves nothing: the cache must do
    assert pin.fetch_verified("vllm-omni", "0.1.0", downloads, None, registry_digest) == got
    served.append(wheel)
    again = (
        r"has sha256 [0-9a-f]{64} \(the cached copy and a fresh download agree\), not the expected"
    )
    with pytest.raises(pin.PinError, match=f"{again} {'0' * 64}"):
        pin.fetch_verified("vllm-omni", "0.1.0", downloads, None, lambda _name: "0" * 64)
    # the good wheel stays cached
    assert (downloads / wheel.name).read_bytes() == wheel.read_bytes()
    (downloads / wheel.name).unlink()  # an empty cache: the next fetch downloads
    served.append(wheel.with_name("vllm_omni-0.1.0-py3-none-manylinux.whl"))
    with pytest.raises(pin.PinError, match="served 2 wheels for vllm-omni==0.1.0"):
        pin.fetch_verified("vllm-omni", "0.1.0", downloads, None, registry_digest)


Edit = tuple[str, str] | tuple[tuple[str, str], ...]
GOOD_PIN = pin_toml("0.30.0", "vllm_omni-0.30.0-py3-none-any.whl", "0" * 64)
# (what is wrong, the edit of a good pin, what the one line says): upstream.toml against its schema
PIN_FAULTS = [
    ("missing-table", ("[wheel]\n", "[other]\n"), "other is not a field of the pin"),
    ("missing-field", ('version = "0.30.0"\n', ""), "version is missing -- add it"),
    ("missing-git-field", ('tag = "v0.30.0"\n', ""), "git.tag is missing"),
    ("no-pin-at-all", None, "version is missing"),
    ("type-float", ('version = "0.30.0"', "version = 0.30"), 'quote it: version = "0.30"'),
    ("type-int", ('version = "0.30.0"', "version = 30"), 'quote it: version = "30"'),
    ("type-bool", ('source = "wheel"', "source = true"), 'quote it: source = "true"'),
    ("type-date", ('version = "0.30.0"', "version = 2026-01-02"), 'version = "2026-01-02"'),
    ("type-array", ('version = "0.30.0"', 'version = ["0.30.0"]'), "is not a string (an array)"),
    (
        "type-table",
        ('project = "vllm-omni"', 'project = { name = "vllm-omni" }'),
        'write it as a quoted string: project = "vllm-omni"',
    ),
    (
        "type-table-version",
        ('version = "0.30.0"', 'version = { v = "0.30.0" }'),
        'is not a string (a table) -- write it as a quoted string: version = "0.30.0"',
    ),
    (
        "type-sub-table",
        (
            ('project = "vllm-omni"', 'git = 3\nproject = "vllm-omni"'),
            ('[git]\nurl = "https://example.invalid/x"\ntag = "v0.30.0"\ncommit = ""\n', ""),
        ),
        "git is not a table (an integer)",
    ),
    ("type-commit", ('commit = ""', "commit = 0"), 'quote it: commit = "0"'),
    ("duplicate", ('version = "0.30.0"', 'version = "0.30.0"\nversion = "0.30.1"'), "version ="),
    ("duplicate-table", ("[git]\n", "[wheel]\n[git]\n"), "[wheel]"),
    ("extra-top", ('source = "wheel"', 'source = "wheel"\nname = "x"'), "name is not a field"),
    ("extra-wheel", ("[wheel]\n", "[wheel]\nsize = 3\n"), "wheel.size is not a field of the pin"),
    ("range-sha256", ("0" * 64, "abc"), "not a sha256 hex digest"),
    ("range-source", ('source = "wheel"', 'source = "svn"'), "is not one of wheel, git"),
    ("range-commit", ('commit = ""', 'commit = "abc"'), "not a full commit id"),
    ("range-project", ('project = "vllm-omni"', 'project = "../etc"'), "not a project name"),
    ("range-version", ('version = "0.30.0"', 'version = "0.30 .0"'), "is not a version"),
    ("range-filename", ("vllm_omni-0.30.0-py3", "vllm_omni-0.30.0"), "not a wheel's file name"),
    ("range-other-project", ("vllm_omni-0.30.0-py3", "torch-0.30.0-py3"), "not a wheel of"),
    ("range-other-version", ("vllm_omni-0.30.0-py3", "vllm_omni-0.31.0-py3"), "same release"),
    ("range-empty-url", ('url = "https://example.invalid/x"', 'url = ""'), "git.url = '' is empty"),
]


@pytest.mark.parametrize(
    ("edit", "needle"), [f[1:] for f in PIN_FAULTS], ids=[f[0] for f in PIN_FAULTS]
)
def test_pin_file_against_its_schema(edit: Edit | None, needle: str) -> None:
    """Each fault is one PinError naming patches/upstream.toml and the field, never a traceback."""
    text = 'project = "vllm-omni"\n' if edit is None else GOOD_PIN
    for old, new in [] if edit is None else edit if isinstance(edit[0], tuple) else [edit]:
        text = text.replace(old, new, 1)
    assert edit is None or text != GOOD_PIN
    with pytest.raises(pin.PinError) as caught:
        pin.parse_pin(text)
    assert str(caught.value).startswith("patches/upstream.toml") and needle in str(caught.value)
    assert " -- " in str(caught.value)
    assert pin.parse_pin(GOOD_PIN).version == "0.30.0"  # the check bites only on the fault


def make_git_upstream(tmp_path: Path, kit: Kit | None, commit: str = "") -> tuple[Path, str]:
    """A git upstream tagged v0.1.0 holding SMALL_UPSTREAM, and the kit's pin (if any) pointed at it."""
    repo = tmp_path / "upstream.git"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    commit_patch(repo, SMALL_UPSTREAM, "release", "release")
    git("tag", "-a", "v0.1.0", "-m", "v0.1.0", cwd=repo, env=AUTHOR)
    git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=repo)
    if kit:
        text = (
            (kit.patches / "upstream.toml")
            .read_text()
            .replace("https://example.invalid/x", repo.as_uri())
        )
        kit.write_pin(text.replace('commit = ""', f'commit = "{commit}"'))
    return repo, git("rev-parse", "HEAD", cwd=repo).strip()


def test_git_source_against_a_local_repository(small_kit: Kit, tmp_path: Path) -> None:
    repo, commit = make_git_upstream(tmp_path, small_kit)
    # The commit is recorded from the tag, as a contributor with network would do.
    small_kit.run("pin", "--record-git", check=True)
    assert f'commit = "{commit}"' in (small_kit.patches / "upstream.toml").read_text()
    out = small_kit.run("apply", "--source", "git", check=True).stdout
    assert "(git)" in out
    assert git("rev-parse", "pristine", cwd=small_kit.checkout).strip() == commit


def test_record_git_refuses_a_tag_whose_files_differ_from_the_wheel(
    small_kit: Kit, tmp_path: Path
) -> None:
    repo, _ = make_git_upstream(tmp_path, small_kit)
    commit_patch(repo, {"vllm_omni/attn.py": "not the release\n"}, "drift", "drift")
    git("tag", "-f", "-a", "v0.1.0", "-m", "v0.1.0", cwd=repo, env=AUTHOR)
    proc = small_kit.run("pin", "--record-git")
    assert (
        proc.returncode == 2
        and "differs from the pinned wheel in 1 file(s), e.g. vllm_omni/attn.py" in proc.stderr
    )
    assert 'commit = ""' in (small_kit.patches / "upstream.toml").read_text()  # nothing written


def test_git_source_needs_a_recorded_commit_and_the_right_one(
    small_kit: Kit, tmp_path: Path
) -> None:
    proc = small_kit.run("apply", "--source", "git")
    assert proc.returncode == 2 and "pin --record-git" in proc.stderr  # says how to record it
    make_git_upstream(tmp_path, small_kit, commit="1" * 40)
    proc = small_kit.run("apply", "--source", "git")
    assert proc.returncode == 2 and "could not fetch 111111111111" in proc.stderr
    assert not small_kit.checkout.exists()


@pytest.mark.network  # the real 0.30.0 wheel: cached in .work/downloads or from the registry
def test_real_wheel_apply_is_reproducible_and_refresh_is_byte_stable(tmp_path: Path) -> None:
    kit = copy_kit(tmp_path / "kit", with_patches=True)
    for wheel in (KIT_ROOT / ".work" / "downloads").glob("vllm_omni-0.30.0-*.whl"):
        kit.seed_wheel(wheel)  # a cached copy spares the registry; its sha256 is still checked
    first = kit.run("apply", check=True).stdout
    assert "sha256 verified" in first
    ids = kit.git("log", "--format=%H %T")
    assert len(ids.splitlines()) == 1 + len(list(kit.patches.glob("*.patch")))
    shutil.rmtree(kit.checkout)  # a fresh build, not a reuse, must give the same commit ids
    kit.run("apply", check=True)
    assert kit.git("log", "--format=%H %T") == ids
    kit.run("refresh", check=True)
    for patch in (KIT_ROOT / "patches").iterdir():
        assert (kit.patches / patch.name).read_bytes() == patch.read_bytes(), patch.name
    assert "0.30.0, pristine" in kit.git("log", "-1", "--format=%s", "pristine")


@pytest.mark.parametrize(
    "data",
    [b"", b"x\n", b"caf\xe9\r\n", bytes(range(256))],
    ids=["empty", "text", "latin1", "binary"],
)
def test_blob_ids_of_wheel_entries_are_gits(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(data)
    assert git_blob_id(data) == git("hash-object", "--no-filters", str(path), cwd=tmp_path).strip()


def test_the_pin_is_rewritten_in_place_as_the_user_wrote_it(tmp_path: Path) -> None:
    """pin --record-git and rebase --move set a key on the line the user wrote, in either quotes,
    with its spacing and comment kept; a file without that line is refused, never half-written."""
    text = GOOD_PIN.replace('commit = ""', "commit='' # filled by pin --record-git")
    assert pin.parse_pin(text).git_commit == ""
    path = tmp_path / "upstream.toml"
    path.write_text(text, encoding="utf-8")
    pin.record_git_commit(path, "a" * 40)
    written = path.read_text(encoding="utf-8")
    assert written == text.replace("commit=''", f'commit="{"a" * 40}"')
    assert pin.parse_pin(written).git_commit == "a" * 40
    path.write_text(GOOD_PIN.replace('commit = ""\n', ""), encoding="utf-8")
    with pytest.raises(pin.PinError, match="no single 'commit = ' line"):
        pin.record_git_commit(path, "a" * 40)


def test_a_killed_downloads_folder_is_removed_by_the_next_fetch(tmp_path: Path) -> None:
    """A download killed outright leaves .work/downloads/.download-XXXXXXXX (a wheel's worth of
    bytes); the next fetch removes it, and only such: a live download's, and a folder of anyone
    else's, stay."""
    downloads = tmp_path / "downloads"
    wheel, digest = build_wheel(tmp_path, SMALL_UPSTREAM)
    downloads.mkdir()
    shutil.copy2(wheel, downloads / wheel.name)
    killed = downloads / ".download-dead1234"
    killed.mkdir()
    (killed / "vllm_omni-0.1.0-py3-none-any.whl").write_bytes(b"half a wheel")
    (killed / worklock.SCRATCH_LOCK).write_text("pid 1 (kit apply)\n")
    older = downloads / ".download-old12345"  # a kit before the lock left it: pip's files only
    older.mkdir()
    (older / "x.whl").write_bytes(b"x")
    other = downloads / ".download-notes"
    (other / "sub").mkdir(parents=True)
    with worklock.scratch(downloads, ".download-") as live:
        got = pin.fetch_verified("vllm-omni", "0.1.0", downloads, wheel.name, lambda _n: digest)
        assert got == (downloads / wheel.name, digest)
        assert live.is_dir() and (other / "sub").is_dir()
    assert not killed.exists() and not older.exists()
