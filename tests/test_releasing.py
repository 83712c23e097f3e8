"""Releasing one package at a time (docs/releasing.md): the version ranges between packages hold, a bump
changes only its own package's files and uv.lock, tags and changelogs say what the tools expect, and a built
distribution with a bad version, README link or missing marker is caught before it is published."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import io
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from distribution_checks import check_distribution, readme_link_problems  # noqa: E402
from packaging.version import Version  # noqa: E402
from release import changelog_entry, check_tag  # noqa: E402
from workspace_packages import (  # noqa: E402
    ReleaseError,
    compatible_range,
    internal_requirements,
    load_workspace,
    next_version,
    range_problems,
)

PACKAGES = load_workspace(ROOT)
KEEP_A_CHANGELOG = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_five_packages_are_released_separately():
    assert sorted(PACKAGES) == [
        "haliax-lite", "meltemi-datastore", "meltemi-kernels", "meltemi-raytpu", "meltemi-trainer",
    ]  # fmt: skip


def test_every_internal_requirement_admits_the_workspace_version_and_is_bounded():
    assert internal_requirements(PACKAGES), "the trainer requires the other packages"
    assert range_problems(PACKAGES) == []


@pytest.mark.parametrize("internal", internal_requirements(PACKAGES), ids=lambda i: i.describe())
def test_a_breaking_release_of_a_required_package_is_caught(internal):
    required = PACKAGES[internal.requirement.name]
    breaking = next_version(required.version, "major" if required.version.major else "minor")
    bumped = {**PACKAGES, required.dist: dataclasses.replace(required, version=breaking)}
    problems = range_problems(bumped)
    assert any(internal.dependent.dist in p and f"excludes {required.dist} {breaking}" in p for p in problems)


def test_a_range_without_an_upper_bound_is_reported():
    trainer = PACKAGES["meltemi-trainer"]
    unbounded = tuple(
        (type(r)(f"{r.name}>=0.1") if r.name == "haliax-lite" else r, extra)
        for r, extra in trainer.requirements
    )
    problems = range_problems(
        {**PACKAGES, trainer.dist: dataclasses.replace(trainer, requirements=unbounded)}
    )
    assert problems == [
        f"meltemi-trainer requires haliax-lite>=0.1: give it a lower and an upper bound, such as "
        f"haliax-lite>=0.1,<0.2 ({trainer.pyproject})"
    ]


versions = st.builds(Version, st.tuples(*[st.integers(0, 30)] * 3).map(lambda t: ".".join(map(str, t))))


@given(versions, st.sampled_from(["major", "minor", "patch"]))
def test_a_bump_gives_a_newer_version_with_the_lower_parts_zeroed(version, part):
    bumped = next_version(version, part)
    assert bumped > version
    kept = {"major": 0, "minor": 1, "patch": 2}[part]
    assert bumped.release[:kept] == version.release[:kept] and all(p == 0 for p in bumped.release[kept + 1 :])


@given(versions)
def test_the_compatible_range_admits_compatible_releases_only(version):
    from packaging.specifiers import SpecifierSet

    allowed = SpecifierSet(compatible_range(version))
    assert version in allowed and next_version(version, "patch") in allowed
    assert next_version(version, "major" if version.major else "minor") not in allowed
    assert next_version(version, "major") not in allowed
    if version.minor:
        assert Version(f"{version.major}.{version.minor - 1}.9") not in allowed


@pytest.mark.parametrize("package", PACKAGES.values(), ids=lambda p: p.dist)
def test_each_changelog_keeps_a_changelog_newest_first(package):
    text = package.changelog.read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n")
    releases = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d\d-\d\d))?$", text, re.MULTILINE)
    assert releases[0] == ("Unreleased", "")
    assert len(re.findall(r"^## ", text, re.MULTILINE)) == len(releases), "every ## heading is a release"
    dated = [(Version(v), datetime.date.fromisoformat(d)) for v, d in releases[1:]]
    assert dated and dated == sorted(dated, reverse=True)
    assert set(re.findall(r"^### (.*)$", text, re.MULTILINE)) <= KEEP_A_CHANGELOG
    assert changelog_entry(package, package.version)


@pytest.mark.parametrize("package", PACKAGES.values(), ids=lambda p: p.dist)
def test_each_package_marks_itself_typed_and_links_only_inside_itself(package):
    assert list((package.directory / "src").rglob("py.typed")), "type hints reach users through py.typed"
    shipped = {str(p.relative_to(package.directory)) for p in package.directory.rglob("*") if p.is_file()}
    assert readme_link_problems((package.directory / "README.md").read_text(encoding="utf-8"), shipped) == []


def test_readme_links_that_lead_nowhere_on_pypi_are_named():
    markdown = (
        "# T\n## Usage\n[a](../kernels) [b](#usage) [c](#nope) [d](docs/x.md) [e](LICENSE) [f](https://x)\n"
    )
    assert readme_link_problems(markdown, {"README.md", "LICENSE"}) == [
        "link '../kernels' points outside the package: use an absolute URL",
        "link '#nope' has no heading to go to",
        "link 'docs/x.md' names a file the sdist does not ship",
    ]


@pytest.mark.parametrize("package", PACKAGES.values(), ids=lambda p: p.dist)
def test_a_release_tag_names_its_package_and_version(package):
    assert check_tag(ROOT, f"{package.dist}-v{package.version}") == (package, package.version)
    later = next_version(package.version, "patch")
    with pytest.raises(ReleaseError, match=f"says {later} but .*pyproject.toml says {package.version}"):
        check_tag(ROOT, f"{package.dist}-v{later}")


@pytest.mark.parametrize("tag", ["v0.1.0", "meltemi-v0.1.0", "meltemi-trainer-0.1.0", "haliax-lite-vX"])
def test_a_tag_that_is_no_release_tag_is_refused(tag):
    with pytest.raises(ReleaseError, match="is not a release tag; those are: .*meltemi-trainer-v<version>"):
        check_tag(ROOT, tag)


@pytest.fixture
def workspace_copy(tmp_path):
    """The files a bump reads or may write, copied: every package's metadata, the lock, the scripts."""
    patterns = ["pyproject.toml", "uv.lock", "scripts/*.py", "packages/*/pyproject.toml", "packages/*/*.md"]
    for pattern in patterns:
        for path in ROOT.glob(pattern):
            target = tmp_path / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return tmp_path


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _bump(root: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(root / "scripts" / "release.py"), "bump", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=root)


@pytest.mark.parametrize("package", PACKAGES.values(), ids=lambda p: p.dist)
def test_a_bump_changes_only_its_package_and_the_lock(workspace_copy, package):
    before = _digests(workspace_copy)
    directory = package.directory.relative_to(ROOT)
    old_changelog = (workspace_copy / directory / "CHANGELOG.md").read_text(encoding="utf-8")
    notes = old_changelog.split("## [Unreleased]\n", 1)[1].split(f"## [{package.version}]", 1)[0]
    result = _bump(workspace_copy, package.dist, "patch")
    assert result.returncode == 0, result.stderr
    changed = {name for name, digest in _digests(workspace_copy).items() if before.get(name) != digest}
    assert changed == {f"{directory}/pyproject.toml", f"{directory}/CHANGELOG.md", "uv.lock"}
    new = next_version(package.version, "patch")
    assert load_workspace(workspace_copy)[package.dist].version == new
    changelog = (workspace_copy / directory / "CHANGELOG.md").read_text(encoding="utf-8")
    today = datetime.date.today().isoformat()
    # the notes gathered under [Unreleased] (none, or some) now open the new version's entry
    assert f"## [Unreleased]\n\n## [{new}] - {today}\n{notes}## [{package.version}]" in changelog
    assert (
        f'name = "{package.dist}"\nversion = "{new}"\nsource = {{ editable'
        in (workspace_copy / "uv.lock").read_text()
    )
    assert f"git tag {package.dist}-v{new}" in result.stdout


def test_a_bump_that_breaks_a_range_changes_nothing_and_says_what_to_widen(workspace_copy):
    before = _digests(workspace_copy)
    result = _bump(workspace_copy, "haliax-lite", "minor")
    assert result.returncode == 1
    assert "haliax-lite 0.2.0 would break a range; nothing was changed" in result.stderr
    assert (
        "meltemi-trainer requires haliax-lite" in result.stderr
        and "packages/trainer/pyproject.toml" in result.stderr
    )
    assert _digests(workspace_copy) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("meltemi-nothing", "patch"),
            "no workspace package is called 'meltemi-nothing'; the packages are: haliax-lite",
        ),
        (("datastore", "0.0.9"), "meltemi-datastore is at 0.1.0 already; 0.0.9 would not be newer"),
        (("datastore", "huge"), "'huge' is neither a version part (major, minor, patch) nor a version"),
    ],
)
def test_a_bad_bump_is_refused_naming_the_mistake(workspace_copy, args, message):
    before = _digests(workspace_copy)
    result = _bump(workspace_copy, *args)
    assert result.returncode == 1 and message in result.stderr
    assert _digests(workspace_copy) == before


def _fake_distribution(
    directory: Path, version: str, *, py_typed: bool = True, readme: str = "# X\n"
) -> None:
    """A wheel and sdist of meltemi-datastore as far as check_distribution reads them."""
    metadata = (
        f"Metadata-Version: 2.4\nName: meltemi-datastore\nVersion: {version}\nSummary: s\n"
        "Project-URL: Repository, https://example.org\nRequires-Python: >=3.11\n"
        "License-Expression: Apache-2.0\n"
        f"Description-Content-Type: text/markdown\n\n{readme}"
    )
    stem = f"meltemi_datastore-{version}"
    with zipfile.ZipFile(directory / f"{stem}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{stem}.dist-info/METADATA", metadata)
        wheel.writestr(f"{stem}.dist-info/licenses/LICENSE", "Apache")
        if py_typed:
            wheel.writestr("meltemi/datastore/py.typed", "")
    with tarfile.open(directory / f"{stem}.tar.gz", "w:gz") as sdist:
        for name, text in (
            ("PKG-INFO", metadata),
            ("README.md", readme),
            ("LICENSE", "A"),
            ("CHANGELOG.md", ""),
        ):
            data = text.encode()
            info = tarfile.TarInfo(f"{stem}/{name}")
            info.size = len(data)
            sdist.addfile(info, io.BytesIO(data))


def test_a_distribution_is_checked_for_what_users_see(tmp_path):
    datastore = PACKAGES["meltemi-datastore"]
    _fake_distribution(tmp_path, str(datastore.version))
    assert check_distribution(datastore, tmp_path) == []
    for path in tmp_path.iterdir():
        path.unlink()
    _fake_distribution(tmp_path, str(datastore.version), py_typed=False, readme="[up](../trainer)\n")
    assert check_distribution(datastore, tmp_path) == [
        "the wheel has no py.typed marker: its type hints would not reach users",
        "README: link '../trainer' points outside the package: use an absolute URL",
    ]
    with pytest.raises(ValueError, match=r"meltemi_datastore-9.9.9.tar.gz was not built \(version 9.9.9\)"):
        check_distribution(datastore, tmp_path, Version("9.9.9"))


def test_the_release_workflow_publishes_each_package_from_its_own_tag_without_a_token():
    workflow = yaml.safe_load((ROOT / ".github/workflows/release.yml").read_text(encoding="utf-8"))
    tags = workflow[True]["push"]["tags"]  # YAML reads the key `on` as True
    assert sorted(tags) == sorted(f"{p.tag_prefix}*" for p in PACKAGES.values())
    publish = workflow["jobs"]["publish"]
    assert publish["permissions"] == {"id-token": "write", "contents": "read"}
    text = (ROOT / ".github/workflows/release.yml").read_text(encoding="utf-8")
    assert "uv publish" in text and "secrets." not in text and "uv build --package" in text
    ci = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text(encoding="utf-8"))
    assert {"push", "pull_request"} <= set(ci[True])
    assert any("bash .ci/run" in step.get("run", "") for job in ci["jobs"].values() for step in job["steps"])


def test_check_tag_prints_what_the_release_workflow_reads(capsys):
    from release import main

    assert main(["check-tag", "meltemi-trainer-v" + str(PACKAGES["meltemi-trainer"].version)]) == 0
    fields = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    assert fields == {
        "dist": "meltemi-trainer",
        "directory": "packages/trainer",
        "version": str(PACKAGES["meltemi-trainer"].version),
        "module": "meltemi.trainer",
        "extras": "eval,ray,tensorboard,wandb",
    }
