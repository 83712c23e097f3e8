"""Wheels for a GPU call of ``benchmarks/gpu.py``, and the call itself.

The device tool's GPU machine has its own Python 3.12 with JAX, PyTorch, transformers, equinox, optax,
tensorstore, tokenizers and the rest (``/work/.library/device/KINDS.md``), but not our packages, pydantic or
google-crc32c, and it cannot reach a package index. This script puts into ``.whl/`` (ignored through git's
``info/exclude``, never committed):

- our four packages' wheels (``uv build --package ...``; raytpu is not needed), built from ``HEAD`` (a clean
  ``git archive`` of it, so that others' uncommitted edits in the checkout do not travel as our packages;
  ``--working-tree`` builds what is on disk instead); ``.whl/built_from.txt`` names the source, and
  ``gpu.py`` prints it in its table;
- the wheels the image lacks, at the versions ``uv.lock`` pins, for CPython 3.12 on manylinux x86_64
  (``pip download --no-deps --only-binary=:all:``);

checks that there is one wheel per distribution, that each fits that Python, and that ``.whl`` stays under
``--limit-mib``; then prints the command prefix that installs them there and the exact ``run`` call
(command under 2,000 characters, ``carry``, ``timeout_s``) for ``benchmarks/gpu.py --out $OUT``.

    python3 benchmarks/gpu_prepare.py            # any Python with pip, uv on the PATH
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".whl"
OURS = ("haliax-lite", "meltemi-kernels", "meltemi-datastore", "meltemi-trainer")
# What our packages import and the GPU image lacks (KINDS.md's package list, read 2026-11-17): pydantic and
# its own dependencies (the trainer's config), google-crc32c (the datastore). zarr is not imported on the
# paths the benchmarks take.
MISSING = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "google-crc32c")
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
INSTALL = (
    "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
    ".whl/*.whl && export PYTHONPATH=/tmp/site || exit;"
)
COMMAND_LIMIT = 2000


def run(command: list[str], cwd: Path = ROOT) -> None:
    """Run ``command`` in ``cwd``, echoing it; stop on failure."""
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=cwd, check=True)


def git(*words: str) -> str:
    return subprocess.run(
        ["git", *words], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def export_head(into: Path) -> str:
    """Extract ``HEAD``'s files into ``into``; return what they are (``commit <sha>``)."""
    archive = subprocess.Popen(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        sys.exit("git archive HEAD failed")
    return f"commit {git('rev-parse', '--short=12', 'HEAD')} of {git('log', '-1', '--format=%cs', 'HEAD')}"


def ignore_wheels() -> None:
    """Add ``/.whl/`` to the repository's ``info/exclude`` (once), so the wheels are never committed."""
    path = git("rev-parse", "--git-path", "info/exclude")
    exclude = ROOT / path
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if "/.whl/" not in lines:
        exclude.write_text("\n".join([*lines, "/.whl/"]) + "\n")
        print(f"added /.whl/ to {path}")


def locked_versions(names: tuple[str, ...]) -> dict[str, str]:
    """Each distribution's version in ``uv.lock`` (exactly one each, or an error)."""
    packages = tomllib.loads((ROOT / "uv.lock").read_text())["package"]
    versions = {}
    for name in names:
        found = sorted({p["version"] for p in packages if p["name"] == name})
        if len(found) != 1:
            sys.exit(f"uv.lock holds {len(found)} versions of {name} ({found}): pick one by hand")
        versions[name] = found[0]
    return versions


def pip() -> list[str]:
    """A pip to download with: this Python's, else ``python3``'s (uv's environments have none)."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    return ["python3", "-m", "pip"]


def build_ours(source: Path) -> None:
    """Our packages' wheels from the workspace at ``source`` into ``.whl``."""
    for package in OURS:
        run(["uv", "build", "--quiet", "--package", package, "--wheel", "--out-dir", str(WHEELS)], cwd=source)


def download(versions: dict[str, str]) -> None:
    platforms = [word for platform in PLATFORMS for word in ("--platform", platform)]
    run(
        [
            *pip(),
            *("download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", "3.12"),
            *("--implementation", "cp", *platforms, "--dest", str(WHEELS)),
            *(f"{name}=={version}" for name, version in versions.items()),
        ]
    )


def distribution(wheel: Path) -> tuple[str, str, str]:
    """(normalized name, version, tags) from a wheel's file name."""
    name, version, *tags = wheel.name.removesuffix(".whl").split("-")
    return name.lower().replace("_", "-"), version, "-".join(tags)


def check(versions: dict[str, str], limit_mib: float) -> None:
    """One wheel per distribution, the locked versions, tags a CPython 3.12 on x86_64 Linux takes, and the
    folder under ``limit_mib``."""
    wheels = sorted(WHEELS.glob("*.whl"))
    seen: dict[str, str] = {}
    for wheel in wheels:
        name, version, tags = distribution(wheel)
        if name in seen:
            sys.exit(f"two wheels of {name} ({seen[name]}, {version}): pip would refuse to install both")
        seen[name] = version
        python, abi, platform = tags.split("-")[-3:]
        fits = platform == "any" or ("x86_64" in platform and "linux" in platform)
        if not fits or python not in ("py3", "cp312", "py2.py3") or abi not in ("none", "cp312", "abi3"):
            sys.exit(f"{wheel.name} is not for CPython 3.12 on x86_64 Linux")
    for name, version in versions.items():
        if seen.get(name) != version:
            sys.exit(f"{name}: .whl holds {seen.get(name)}, uv.lock pins {version}")
    missing = [name for name in OURS if name not in seen]
    if missing:
        sys.exit(f"no wheel of {missing}")
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f".whl: {len(wheels)} wheels, {size:.1f} MiB (limit {limit_mib:.0f} MiB)")
    for wheel in wheels:
        print(f"  {wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB)")
    if size > limit_mib:
        sys.exit(f".whl is {size:.1f} MiB, over {limit_mib:.0f} MiB")


def travelling_mib() -> float:
    """MiB of the working tree that a device call sends: tracked and untracked-but-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    paths = (ROOT / p.decode() for p in listed if p)
    return sum(p.stat().st_size for p in paths if p.is_file()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-mib", type=float, default=40, help="the most .whl may hold")
    parser.add_argument("--budget-s", type=int, default=480, help="gpu.py's --budget-s in the printed call")
    parser.add_argument(
        "--working-tree", action="store_true", help="build our packages from the files on disk, not HEAD"
    )
    args = parser.parse_args()
    ignore_wheels()
    shutil.rmtree(WHEELS, ignore_errors=True)
    WHEELS.mkdir()
    versions = locked_versions(MISSING)
    with tempfile.TemporaryDirectory() as scratch:
        if args.working_tree:
            source, built_from = ROOT, "the working tree (uncommitted changes included)"
        else:
            source, built_from = Path(scratch), export_head(Path(scratch))
        build_ours(source)
    (WHEELS / "built_from.txt").write_text(built_from + "\n")
    print(f"our wheels: {built_from}")
    download(versions)
    check(versions, args.limit_mib)
    tree = travelling_mib()
    wheels = sum(w.stat().st_size for w in WHEELS.glob("*.whl")) / 2**20
    print(f"a device call sends {tree:.1f} MiB of working tree + {wheels:.1f} MiB of wheels (limit 64 MiB)")

    command = f"{INSTALL} PYTHONUNBUFFERED=1 python3 benchmarks/gpu.py --budget-s {args.budget_s} --out $OUT"
    if len(command) >= COMMAND_LIMIT:
        sys.exit(f"the command is {len(command)} characters, over the tool's {COMMAND_LIMIT}")
    print("\nprefix for any device command that needs our packages:")
    print(INSTALL)
    print("\nthe device call (the `run` tool's arguments):")
    print(json.dumps({"command": command, "carry": [".whl"], "timeout_s": 600}, indent=2))


if __name__ == "__main__":
    main()
