"""The workspace's published packages as the release tools see them: each one's name, directory, version and
requirements on the others, read from ``packages/*/pyproject.toml`` (the one place a version is written).

>>> from packaging.version import Version
>>> [str(next_version(Version("0.3.1"), part)) for part in ("patch", "minor", "major")]
['0.3.2', '0.4.0', '1.0.0']
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("major", "minor", "patch")


class ReleaseError(Exception):
    """A release step that cannot go on; the message says what is wrong and where, and nothing was written."""


@dataclasses.dataclass(frozen=True)
class Package:
    """One distribution of the workspace: ``dist`` as published (``meltemi-datastore``), its directory
    (``packages/datastore``), its version and every requirement it declares, each with the optional extra
    it belongs to (None: a plain dependency)."""

    dist: str
    directory: Path
    version: Version
    requirements: tuple[tuple[Requirement, str | None], ...]

    @property
    def tag_prefix(self) -> str:
        """Its release tags are ``<dist>-v<version>``: ``meltemi-datastore-v0.2.0``."""
        return f"{self.dist}-v"

    @property
    def import_name(self) -> str:
        """The module it installs: ``haliax_lite``, or ``meltemi.datastore`` under the namespace."""
        inits = sorted((self.directory / "src").glob("*/__init__.py")) or sorted(
            (self.directory / "src").glob("*/*/__init__.py")
        )
        if len(inits) != 1:
            raise ReleaseError(f"{self.directory / 'src'}: expected one import package, found {len(inits)}")
        return ".".join(inits[0].parent.relative_to(self.directory / "src").parts)

    @property
    def extras(self) -> list[str]:
        """Its optional extras (``ray``, ``wandb``, ...), sorted."""
        return sorted({extra for _, extra in self.requirements if extra})

    @property
    def pyproject(self) -> Path:
        return self.directory / "pyproject.toml"

    @property
    def changelog(self) -> Path:
        return self.directory / "CHANGELOG.md"


@dataclasses.dataclass(frozen=True)
class InternalRequirement:
    """``dependent`` requires ``requirement`` (a range on another workspace package); ``extra`` names the
    optional extra it sits in, if any."""

    dependent: Package
    requirement: Requirement
    extra: str | None

    def describe(self) -> str:
        where = f"[{self.extra}]" if self.extra else ""
        return f"{self.dependent.dist}{where} requires {self.requirement.name}{self.requirement.specifier}"


def load_workspace(root: Path = ROOT) -> dict[str, Package]:
    """Every package under ``root/packages``, by distribution name."""
    packages = {}
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        try:
            version = Version(project["version"])
        except (KeyError, InvalidVersion) as e:
            raise ReleaseError(f"{pyproject}: [project] version is missing or invalid ({e})") from None
        requirements = [(Requirement(r), None) for r in project.get("dependencies", [])]
        for extra, extra_requirements in project.get("optional-dependencies", {}).items():
            requirements += [(Requirement(r), extra) for r in extra_requirements]
        dist = canonicalize_name(project["name"])
        packages[dist] = Package(dist, pyproject.parent, version, tuple(requirements))
    return packages


def find_package(packages: dict[str, Package], name: str) -> Package:
    """A package by distribution name (``meltemi-datastore``) or directory name (``datastore``)."""
    for package in packages.values():
        if canonicalize_name(name) == package.dist or name == package.directory.name:
            return package
    known = ", ".join(sorted(packages))
    raise ReleaseError(f"no workspace package is called {name!r}; the packages are: {known}")


def internal_requirements(packages: dict[str, Package]) -> list[InternalRequirement]:
    """Every requirement one workspace package places on another."""
    found = []
    for package in packages.values():
        for requirement, extra in package.requirements:
            if canonicalize_name(requirement.name) in packages:
                found.append(InternalRequirement(package, requirement, extra))
    return found


def range_problems(packages: dict[str, Package]) -> list[str]:
    """What is wrong with the ranges between workspace packages: a requirement the required package's
    current version does not satisfy, or one without both a lower and an upper bound (the compatibility
    policy in docs/releasing.md). Empty when all is well.

    >>> from packaging.requirements import Requirement
    >>> lib = Package("lib", Path("packages/lib"), Version("0.2.0"), ())
    >>> app = Package("app", Path("packages/app"), Version("1.0.0"), ((Requirement("lib>=0.1,<0.2"), None),))
    >>> range_problems({"lib": lib, "app": app})
    ['app requires lib<0.2,>=0.1, which excludes lib 0.2.0 (packages/app/pyproject.toml)']
    """
    problems = []
    for internal in internal_requirements(packages):
        required = packages[canonicalize_name(internal.requirement.name)]
        specifier = internal.requirement.specifier
        if not specifier.contains(required.version, prereleases=True):
            problems.append(
                f"{internal.describe()}, which excludes {required.dist} {required.version} "
                f"({internal.dependent.pyproject})"
            )
        operators = {s.operator for s in specifier}
        if not operators & {">=", ">", "~=", "=="} or not operators & {"<", "<=", "~=", "=="}:
            problems.append(
                f"{internal.describe()}: give it a lower and an upper bound, such as "
                f"{required.dist}{compatible_range(required.version)} ({internal.dependent.pyproject})"
            )
    return problems


def next_version(version: Version, part: str) -> Version:
    """``version`` with ``part`` (``major``, ``minor`` or ``patch``) increased, the parts after it zero."""
    major, minor, patch = (list(version.release) + [0, 0])[:3]
    if part == "major":
        return Version(f"{major + 1}.0.0")
    if part == "minor":
        return Version(f"{major}.{minor + 1}.0")
    if part == "patch":
        return Version(f"{major}.{minor}.{patch + 1}")
    raise ReleaseError(f"a version part is one of {', '.join(PARTS)}, not {part!r}")


def compatible_range(version: Version) -> str:
    """The range a dependent writes on ``version``: its API series, up to the next release allowed to break
    it (the next minor before 1.0, the next major from 1.0).

    >>> compatible_range(Version("0.2.3")), compatible_range(Version("1.4.0"))
    ('>=0.2,<0.3', '>=1.4,<2')
    """
    upper = next_version(version, _breaking_part(version))
    return f">={_series(version)},<{upper.major if version.major else _series(upper)}"


def _breaking_part(version: Version) -> str:
    return "major" if version.major else "minor"


def _series(version: Version) -> str:
    return f"{version.major}.{version.minor}"
