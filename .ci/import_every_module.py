"""Import every module of an installed package, in a fresh environment holding only what it declares: each
must import, except those of an optional extra, which may fail only for a package that extra brings.

    python .ci/import_every_module.py meltemi.datastore --extra testing=pytest,moto --extra ray=ray
"""

import argparse
import importlib
import pkgutil
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("package")
    parser.add_argument(
        "--extra", action="append", default=[], help="NAME=MODULE,MODULE: what an extra brings"
    )
    args = parser.parse_args()
    brought = {module: name for extra in args.extra for name, _, modules in [extra.partition("=")]
               for module in modules.split(",")}  # fmt: skip
    package = importlib.import_module(args.package)
    modules = pkgutil.walk_packages(package.__path__, f"{args.package}.", onerror=lambda name: None)
    names = [args.package, *(m.name for m in modules if not m.name.endswith(".__main__"))]
    failed, optional = [], []
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            missing = error.name or ""
            top = next((m for m in brought if missing == m or missing.startswith(m + ".")), None)
            if top is not None:
                optional.append(f"{name} (the [{brought[top]}] extra: {missing})")
            else:
                failed.append(f"{name}: {error}")
        except Exception as error:  # any other failure at import is a defect of the wheel
            failed.append(f"{name}: {type(error).__name__}: {error}")
    for line in failed:
        print(f"cannot import {line}", file=sys.stderr)
    extras = f"; needing an extra: {', '.join(optional)}" if optional else ""
    print(
        f"{args.package}: {len(names) - len(failed) - len(optional)} of {len(names)} modules import{extras}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
