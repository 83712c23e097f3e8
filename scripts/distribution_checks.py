"""Checks on a package's built sdist and wheel before anyone installs them, and the PEP 503 index that
``.ci/check_wheels`` installs them from.

A README is the package's page on PyPI, where a link relative to the repository leads nowhere: its links
must be absolute URLs, anchors of its own headings, or files the sdist ships.

>>> readme_link_problems("[a](https://x.org) [b](#usage) [c](../other)\\n## Usage\\n", {"README.md"})
["link '../other' points outside the package: use an absolute URL"]
"""

from __future__ import annotations

import hashlib
import html
import re
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version
from workspace_packages import Package

# Fields PyPI shows users: where the project lives, what it runs on, under what license.
REQUIRED_METADATA = ("Name", "Version", "Summary", "Requires-Python", "License-Expression", "Project-URL")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def distribution_files(
    package: Package, directory: Path, version: Version | None = None
) -> tuple[Path, Path]:
    """The sdist and the wheel of ``package`` at ``version`` (its workspace version by default) in
    ``directory``; a missing one is a ValueError naming the file expected."""
    version = version or package.version
    stem = f"{package.dist.replace('-', '_')}-{version}"
    files = (directory / f"{stem}.tar.gz", directory / f"{stem}-py3-none-any.whl")
    for path in files:
        if not path.is_file():
            present = ", ".join(sorted(p.name for p in directory.iterdir())) or "nothing"
            raise ValueError(f"{path} was not built (version {version}); {directory} holds: {present}")
    return files


def check_distribution(package: Package, directory: Path, version: Version | None = None) -> list[str]:
    """What is wrong with ``package``'s sdist and wheel in ``directory``: the version each says, the metadata
    PyPI shows, the README's links, the license, ``py.typed`` and the changelog shipped. Empty when all is
    well."""
    version = version or package.version
    sdist, wheel = distribution_files(package, directory, version)
    problems = []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode("utf-8"))
    with tarfile.open(sdist) as archive:
        sdist_root = f"{package.dist.replace('-', '_')}-{version}/"
        sdist_files = {m.name.removeprefix(sdist_root) for m in archive.getmembers() if m.isfile()}
        pkg_info = Parser().parsestr(archive.extractfile(sdist_root + "PKG-INFO").read().decode("utf-8"))
    for what, fields in (("wheel", metadata), ("sdist", pkg_info)):
        if canonicalize_name(fields["Name"] or "") != package.dist:
            problems.append(f"{what} is named {fields['Name']!r}, not {package.dist!r}")
        if Version(fields["Version"] or "0") != version:
            problems.append(f"{what} says version {fields['Version']}, not {version}")
    problems += [f"wheel metadata has no {field}" for field in REQUIRED_METADATA if not metadata[field]]
    if metadata["Description-Content-Type"] != "text/markdown":
        problems.append(f"README content type is {metadata['Description-Content-Type']!r}, not text/markdown")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append("the wheel ships no LICENSE under .dist-info/licenses/")
    if not any(n.endswith("/py.typed") for n in names):
        problems.append("the wheel has no py.typed marker: its type hints would not reach users")
    if any(n == "meltemi/__init__.py" for n in names):
        problems.append("the wheel ships meltemi/__init__.py; meltemi must stay a namespace package")
    local = [r for r in metadata.get_all("Requires-Dist") or [] if re.search(r"file:|@ |packages/", r)]
    problems += [f"requirement {r!r} names a local path" for r in local]
    problems += [
        f"the sdist lacks {name}"
        for name in ("README.md", "LICENSE", "CHANGELOG.md")
        if name not in sdist_files
    ]
    problems += [f"README: {p}" for p in readme_link_problems(metadata.get_payload(), sdist_files)]
    return problems


def readme_link_problems(markdown: str, shipped: set[str]) -> list[str]:
    """Links in ``markdown`` that would not resolve on the package's PyPI page: a relative path not among
    ``shipped`` (the sdist's files, relative to the package) or leaving the package, or an anchor no
    heading makes. Code blocks are skipped."""
    prose = FENCE.sub("", markdown)
    anchors = {_slug(h) for h in HEADING.findall(prose)}
    directories = {str(Path(f).parent) for f in shipped}
    problems = []
    for target in LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        if not path:
            if anchor not in anchors:
                problems.append(f"link '#{anchor}' has no heading to go to")
            continue
        normal = Path(path).as_posix().rstrip("/")
        if normal.startswith("..") or normal.startswith("/"):
            problems.append(f"link {target!r} points outside the package: use an absolute URL")
        elif normal not in shipped and normal not in directories:
            problems.append(f"link {target!r} names a file the sdist does not ship")
    return problems


def readme_example(markdown: str) -> str:
    """The one Python example of a README, to run as a script in an environment with the package installed.

    >>> readme_example("Intro\\n```python\\nprint(1)\\n```\\n```bash\\nls\\n```\\n")
    'print(1)\\n'
    """
    blocks = re.findall(r"^```python\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)
    if len(blocks) != 1:
        raise ValueError(f"expected one ```python example in the README, found {len(blocks)}")
    return blocks[0]


def write_simple_index(files: list[Path], index: Path) -> Path:
    """A PEP 503 simple index of ``files`` (wheels and sdists) in the directory ``index``: one page per
    project listing its files with their SHA-256, which pip and uv read as ``file://`` + ``index``.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> wheel = d / "meltemi_x-0.1.0-py3-none-any.whl"; _ = wheel.write_bytes(b"")
    >>> page = write_simple_index([wheel], d / "simple") / "meltemi-x" / "index.html"
    >>> "meltemi_x-0.1.0-py3-none-any.whl#sha256=e3b0c442" in page.read_text()
    True
    """
    projects: dict[str, list[Path]] = {}
    for path in files:
        name = path.name.removesuffix(".tar.gz").split("-")[0]
        projects.setdefault(canonicalize_name(name), []).append(path)
    for project, project_files in projects.items():
        page = index / project
        page.mkdir(parents=True, exist_ok=True)
        links = []
        for path in sorted(project_files):
            (page / path.name).write_bytes(path.read_bytes())
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            links.append(
                f'<a href="{html.escape(path.name)}#sha256={digest}">{html.escape(path.name)}</a><br>'
            )
        (page / "index.html").write_text(_page(project, links), encoding="utf-8")
    root_links = [f'<a href="{p}/">{p}</a><br>' for p in sorted(projects)]
    (index / "index.html").write_text(_page("Simple index", root_links), encoding="utf-8")
    return index


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(links)
    head = f"<!DOCTYPE html>\n<html><head><title>{html.escape(title)}</title></head><body>"
    return f"{head}\n{body}\n</body></html>\n"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
