"""The ``chute`` command line: ``chute info|verify|convert|bench|demo ...``.

Each subcommand is a thin argparse front over a library function; the logic lives in the
library, so everything the CLI does can be done from Python too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import format as fmt
from .errors import ChuteError


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError


def _describe(f: fmt.Field) -> str:
    if isinstance(f, fmt.Tensor):
        return f"tensor  {f.dtype:<10} {tuple(f.shape)}"
    if isinstance(f, fmt.Ragged):
        inner = ", ".join("?" if d is None else str(d) for d in f.inner_shape)
        return f"ragged  {f.dtype:<10} (?{', ' if inner else ''}{inner})"
    return f"{f.kind}"


def cmd_info(args: argparse.Namespace) -> int:
    from .reader import Dataset

    ds = Dataset(args.path)
    print(f"{ds.path}: {len(ds)} samples, {len(ds._parts)} part(s), {_human(ds.nbytes)} on disk")
    width = max(len(n) for n in ds.schema)
    for name, f in ds.schema.items():
        print(f"  {name:<{width}}  {_describe(f)}")
    if ds.metadata:
        print(f"  metadata: {dict(ds.metadata)}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from .verify import verify

    nbytes = verify(args.path, progress=not args.quiet)
    print(f"{args.path}: OK ({_human(nbytes)} checked)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chute", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="fields, shapes, dtypes, sample count, bytes on disk")
    p.add_argument("path")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("verify", help="recompute checksums of every data file")
    p.add_argument("path")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_verify)

    # -- other subcommands register here (convert, bench, demo) --
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ChuteError as exc:
        print(f"chute {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
