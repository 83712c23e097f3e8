"""Release tools for the workspace's five packages, each released on its own (docs/releasing.md).

    uv run python scripts/release.py bump meltemi-datastore minor    # or major, patch, or a version: 0.2.0
    uv run python scripts/release.py ranges                          # the ranges between packages hold
    uv run python scripts/release.py check-tag meltemi-datastore-v0.2.0
    uv run python scripts/release.py check-dist meltemi-datastore dist/
    uv run python scripts/release.py index dist/ index/              # a PEP 503 index of built files
    uv run python scripts/release.py readme-example meltemi-datastore  # its README's example, as a script

``bump`` changes the package's version in its ``pyproject.toml``, opens the new version's entry in its
``CHANGELOG.md`` (the notes gathered under ``[Unreleased]`` move under it, dated today) and sets the version
in ``uv.lock``; it changes no other file. It refuses, writing nothing, a version that another package's range
excludes: widen that range first.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
from pathlib import Path

from distribution_checks import check_distribution, readme_example, write_simple_index
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from workspace_packages import (
    PARTS,
    ROOT,
    Package,
    ReleaseError,
    compatible_range,
    find_package,
    internal_requirements,
    load_workspace,
    next_version,
    range_problems,
)

UNRELEASED = "## [Unreleased]"


def bump(root: Path, name: str, to: str, today: datetime.date) -> tuple[Package, Version]:
    """Give package ``name`` its next version (``to``: a part, or the version itself); see the module's
    docstring. Returns the package as it was and its new version."""
    packages = load_workspace(root)
    package = find_package(packages, name)
    version = _new_version(package, to)
    blocked = [
        f"{internal.describe()}, which excludes {version}: change it in "
        f"{internal.dependent.pyproject.relative_to(root)} to admit {version} (as {package.dist}"
        f"{compatible_range(version)} once {internal.dependent.dist} works with it), then release "
        f"{internal.dependent.dist} too"
        for internal in internal_requirements(packages)
        if canonicalize_name(internal.requirement.name) == package.dist
        and not internal.requirement.specifier.contains(version, prereleases=True)
    ]
    if blocked:
        raise ReleaseError(
            f"{package.dist} {version} would break a range; nothing was changed:\n  " + "\n  ".join(blocked)
        )
    lock = root / "uv.lock"
    texts = {
        package.pyproject: _with_version(package.pyproject, package.version, version),
        package.changelog: _with_entry(package.changelog, version, today),
        lock: _with_locked_version(lock, package, version),
    }
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
    return package, version


def _new_version(package: Package, to: str) -> Version:
    if to in PARTS:
        return next_version(package.version, to)
    try:
        version = Version(to)
    except InvalidVersion:
        raise ReleaseError(f"{to!r} is neither a version part ({', '.join(PARTS)}) nor a version") from None
    if version <= package.version:
        raise ReleaseError(f"{package.dist} is at {package.version} already; {version} would not be newer")
    return version


def _with_version(pyproject: Path, old: Version, new: Version) -> str:
    text = pyproject.read_text(encoding="utf-8")
    line = re.compile(rf'^version = "{re.escape(str(old))}"$', re.MULTILINE)
    if len(line.findall(text)) != 1:
        raise ReleaseError(
            f'{pyproject}: expected one line `version = "{old}"` to change; nothing was changed'
        )
    return line.sub(f'version = "{new}"', text)


def _with_entry(changelog: Path, version: Version, today: datetime.date) -> str:
    if not changelog.is_file():
        raise ReleaseError(f"{changelog} is missing; nothing was changed")
    text = changelog.read_text(encoding="utf-8")
    if text.count(UNRELEASED + "\n") != 1:
        raise ReleaseError(
            f"{changelog}: expected one `{UNRELEASED}` heading above the releases; nothing was changed"
        )
    if re.search(rf"^## \[{re.escape(str(version))}\]", text, re.MULTILINE):
        raise ReleaseError(f"{changelog} has an entry for {version} already; nothing was changed")
    return text.replace(UNRELEASED + "\n", f"{UNRELEASED}\n\n## [{version}] - {today.isoformat()}\n", 1)


def _with_locked_version(lock: Path, package: Package, new: Version) -> str:
    text = lock.read_text(encoding="utf-8")
    entry = re.compile(
        rf'(\[\[package\]\]\nname = "{re.escape(package.dist)}"\nversion = ")'
        rf'{re.escape(str(package.version))}("\nsource = {{ editable = )'
    )
    if len(entry.findall(text)) != 1:
        raise ReleaseError(f"{lock} has no entry for {package.dist} {package.version}: run `uv lock` first")
    return entry.sub(rf"\g<1>{new}\g<2>", text)


def changelog_entry(package: Package, version: Version) -> str:
    """The notes under ``## [version]`` in the package's changelog; a missing or empty entry is an error."""
    text = package.changelog.read_text(encoding="utf-8")
    match = re.search(
        rf"^## \[{re.escape(str(version))}\][^\n]*\n(.*?)(?=^## \[|\Z)", text, re.MULTILINE | re.DOTALL
    )
    if match is None or not match.group(1).strip():
        raise ReleaseError(
            f"{package.changelog} has no notes under `## [{version}]`: write them before tagging"
        )
    return match.group(1).strip()


def check_tag(root: Path, tag: str) -> tuple[Package, Version]:
    """The package and version a release tag ``<dist>-v<version>`` names, once the workspace agrees: the
    package exists, its ``pyproject.toml`` has that version, and its changelog has notes for it."""
    packages = load_workspace(root)
    for package in sorted(packages.values(), key=lambda p: -len(p.dist)):
        if tag.startswith(package.tag_prefix):
            try:
                version = Version(tag.removeprefix(package.tag_prefix))
            except InvalidVersion:
                break
            if version != package.version:
                raise ReleaseError(f"tag {tag} says {version} but {package.pyproject} says {package.version}")
            changelog_entry(package, version)
            return package, version
    prefixes = ", ".join(f"{p.tag_prefix}<version>" for p in packages.values())
    raise ReleaseError(f"tag {tag!r} is not a release tag; those are: {prefixes}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    bump_parser = commands.add_parser("bump", help="give one package its next version and changelog entry")
    bump_parser.add_argument("package", help="distribution (meltemi-datastore) or directory (datastore) name")
    bump_parser.add_argument("to", help=f"{', '.join(PARTS)}, or the new version")
    commands.add_parser("ranges", help="check the version ranges between the workspace's packages")
    tag_parser = commands.add_parser("check-tag", help="check a release tag against the workspace")
    tag_parser.add_argument("tag")
    dist_parser = commands.add_parser("check-dist", help="check a package's built sdist and wheel")
    dist_parser.add_argument("package")
    dist_parser.add_argument("directory", type=Path)
    index_parser = commands.add_parser("index", help="write a PEP 503 simple index of built files")
    index_parser.add_argument("directory", type=Path)
    index_parser.add_argument("index", type=Path)
    example_parser = commands.add_parser("readme-example", help="print a package's README example")
    example_parser.add_argument("package")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ReleaseError as e:
        print(f"release: {e}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "bump":
        package, version = bump(ROOT, args.package, args.to, datetime.date.today())
        locked = subprocess.run(
            ["uv", "lock", "--locked", "--offline"], cwd=ROOT, capture_output=True, text=True
        )
        if locked.returncode:
            raise ReleaseError(f"uv.lock disagrees after the bump ({locked.stderr.strip()}): run `uv lock`")
        changelog = package.changelog.relative_to(ROOT)
        pyproject = package.pyproject.relative_to(ROOT)
        print(f"{package.dist} {package.version} -> {version}: {pyproject}, {changelog}, uv.lock")
        print(f"Next: write the notes under `## [{version}]` in {changelog}, commit, then")
        print(f"  git tag {package.tag_prefix}{version} && git push origin {package.tag_prefix}{version}")
        return 0
    if args.command == "ranges":
        problems = range_problems(load_workspace(ROOT))
        for internal in internal_requirements(load_workspace(ROOT)):
            print(f"{internal.describe()}")
        print(
            "\n".join(problems) if problems else "every range holds the workspace's versions", file=sys.stderr
        )
        return 1 if problems else 0
    if args.command == "check-tag":
        package, version = check_tag(ROOT, args.tag)
        directory = package.directory.relative_to(ROOT)
        print(f"dist={package.dist}\ndirectory={directory}\nversion={version}\nmodule={package.import_name}")
        print(f"extras={','.join(package.extras)}")
        return 0
    if args.command == "check-dist":
        package = find_package(load_workspace(ROOT), args.package)
        try:
            problems = check_distribution(package, args.directory)
        except ValueError as e:
            raise ReleaseError(str(e)) from None
        if problems:
            raise ReleaseError(f"{package.dist} {package.version}:\n  " + "\n  ".join(problems))
        print(f"ok  {package.dist} {package.version}: sdist and wheel")
        return 0
    if args.command == "readme-example":
        package = find_package(load_workspace(ROOT), args.package)
        try:
            print(readme_example((package.directory / "README.md").read_text(encoding="utf-8")), end="")
        except ValueError as e:
            raise ReleaseError(f"{package.directory / 'README.md'}: {e}") from None
        return 0
    files = sorted(args.directory.glob("*.whl")) + sorted(args.directory.glob("*.tar.gz"))
    if not files:
        raise ReleaseError(f"{args.directory} holds no wheels or sdists")
    print(write_simple_index(files, args.index))
    return 0


if __name__ == "__main__":
    sys.exit(main())
