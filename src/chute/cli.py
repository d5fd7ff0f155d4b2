"""The ``chute`` command line: ``chute info|verify|convert|upload|download|bench|demo ...``.

Each subcommand is a thin argparse front over a library function; the logic lives in the
library, so everything the CLI does can be done from Python too.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator, Sequence

from . import __version__
from ._cli_types import check_writable, count, json_object, size
from .demo import DEFAULT_SIZE
from .errors import ChuteError, DatasetExistsError

DESCRIPTION = """\
chute: fast, memory-conscious data loading for PyTorch.

Convert your arrays (npy, npz, HDF5, Zarr), tables (Parquet, Arrow, JSONL, CSV), image
folders or WebDataset shards into a chute dataset once, inspect and check it,
and measure it against the alternatives on your own data. Run "chute COMMAND --help" for the
options of each command."""


CONVERT_HELP = """\
Convert a source into a chute dataset at DST (written atomically; nothing is left on error).

SRC is one of:
  arrays     .npy, .npz, a folder of .npy, HDF5 (.h5/.hdf5), Zarr (folder or .zip)
  images     an image folder: root/CLASS/.../x.jpg as torchvision's ImageFolder (fields
             image, label, path), or a flat folder of images (image, path)
  tables     Parquet (file or folder), Arrow IPC / Feather, JSONL (.jsonl, .gz, .zst),
             CSV / TSV, a Hugging Face datasets save_to_disk folder
  shards     WebDataset .tar files (a file, a folder, or a pattern like 'shard-{000..009}.tar'),
             local or at a URL (s3://bucket/train-{000..009}.tar, s3://bucket/shards/)
The options that apply to each kind are marked below; see docs/convert.md."""

# the contenders of `chute bench`, as the README names them
BENCH_CONTENDERS = (
    "chute vs RAM, np.memmap, HDF5, Zarr, HF datasets, WebDataset, LitData and MosaicML Streaming"
)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError


def cmd_info(args: argparse.Namespace) -> int:
    from .reader.opening import open as open_dataset

    options = {"storage_options": args.storage_options} if args.storage_options else {}
    ds = open_dataset(args.path, **options)  # a URL reads the manifest only
    where = getattr(ds, "url", ds.path)
    print(f"{where}: {len(ds)} samples, {len(ds.parts)} part(s), {_human(ds.nbytes)} on disk")
    width = max(len(n) for n in ds.schema)
    for name, f in ds.schema.items():
        print(f"  {name:<{width}}  {f.describe()}")
    if ds.metadata:
        print(f"  metadata: {dict(ds.metadata)}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from .reader.verify import verify

    nbytes = verify(args.path, progress=not args.quiet, storage_options=args.storage_options)
    print(f"{args.path}: OK ({_human(nbytes)} checked)")
    return 0


@contextlib.contextmanager
def overwrite_flag(dst: str, overwrite: bool) -> Iterator[None]:
    """A dataset at ``dst`` that ``--overwrite`` would replace is refused naming the flag (the
    library's message names ``overwrite=True``); other refusals say what to do themselves."""
    try:
        yield
    except DatasetExistsError as exc:
        if overwrite or not exc.replaceable:
            raise
        raise DatasetExistsError(f"{dst} already exists; pass --overwrite to replace it") from None


def cmd_convert(args: argparse.Namespace) -> int:
    from .conversion import convert, parse_fields, parse_types

    # only the options given: each source takes its own (an image folder has no --nulls)
    given = {
        "workers": args.workers,
        "split_compound": args.split_compound or None,
        "on_error": args.on_error,
        "max_side": args.max_side,
        "quality": args.quality,
        "allow_empty": args.allow_empty or None,
        "nulls": args.nulls,
        "images": args.images.split(",") if args.images else None,
        "image_root": args.image_root,
        "types": parse_types(args.types),
        "processes": args.processes,
        "part_size": args.part_size,
    }
    with overwrite_flag(args.dst, args.overwrite):
        path = convert(
            args.src,
            args.dst,
            fields=parse_fields(args.fields),
            overwrite=args.overwrite,
            progress=not args.quiet,
            **{k: v for k, v in given.items() if v is not None},
        )
    print(f"{path}: written")
    return 0


def cmd_upload(args: argparse.Namespace) -> int:
    from .transfer import upload

    with overwrite_flag(args.url, args.overwrite):
        store = upload(
            args.src,
            args.url,
            storage_options=args.storage_options,
            compression=args.compression,
            level=args.level,
            overwrite=args.overwrite,
            workers=args.workers,
        )
    print(f"{args.src} -> {store.url}: uploaded ({_human(store.stats['bytes_out'])} sent)")
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from .transfer import download

    with overwrite_flag(args.dst, args.overwrite):
        path = download(
            args.url,
            args.dst,
            storage_options=args.storage_options,
            overwrite=args.overwrite,
            workers=args.workers,
        )
    print(f"{args.url} -> {path}: downloaded")
    return 0


def _transfer_arguments(p: argparse.ArgumentParser, workers: int) -> None:
    _storage_options_argument(p)
    p.add_argument(
        "--workers",
        type=count(1),
        default=workers,
        help=f"files transferred at once (default {workers})",
    )


def _storage_options_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--storage-options",
        type=json_object,
        metavar="JSON",
        help="the store's options as a JSON object, as storage_options= in Python (e.g. "
        '\'{"endpoint": "http://127.0.0.1:9000", "region": "us-east-1"}\'); credentials are '
        "better left in the environment (AWS_ACCESS_KEY_ID...)",
    )


def _bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="a chute dataset, or any source chute convert accepts")
    p.add_argument(
        "--max-bytes",
        type=size,
        default=2e9,
        help="copy at most this much of the data into each store (default 2GB)",
    )
    p.add_argument("--batch-size", type=count(1), default=256)
    p.add_argument("--workers", type=count(0), default=None, help="default: min(4, CPU count)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT.json", help="write the results as JSON")
    p.add_argument("--plot", metavar="OUT.png", help="write a bar chart (needs matplotlib)")
    p.add_argument(
        "--drop-caches",
        action="store_true",
        help="empty the page cache before each contender (cold); without root only the "
        "bench's own files are evicted (posix_fadvise)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="stop a contender after this many seconds (default 60; 0: read the whole epoch)",
    )
    p.add_argument("--work-dir", help="where the copies are written (default: the temp dir)")


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.report import plot, table
    from .bench.run import run_bench
    from .errors import require

    if args.json:
        check_writable(args.json, "--json")
    if args.plot:
        require("matplotlib", "bench")
        check_writable(args.plot, "--plot")
    try:
        report = run_bench(
            args.source,
            max_bytes=args.max_bytes,
            batch_size=args.batch_size,
            workers=args.workers,
            seed=args.seed,
            cold=args.drop_caches,
            time_limit=args.time_limit or None,
            work_dir=args.work_dir,
        )
    except OSError as exc:  # no room for the copies, unreadable source: no traceback needed
        print(f"chute bench: error: {exc}", file=sys.stderr)
        return 1
    print(table(report))
    if args.json:
        print(f"JSON: {report.save_json(args.json)}")
    if args.plot:
        print(f"plot: {plot(report, args.plot)}")
    bad = [r.name for r in report.results if r.checksum_ok is False]
    if bad:
        print(f"checksum mismatch: {', '.join(bad)} did not read the same samples in order")
        return 1
    return 0


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--size",
        type=size,
        default=DEFAULT_SIZE,
        help="size of the generated dataset (default 600MB)",
    )
    p.add_argument("--out", default="chute-demo", help="folder for the files (default chute-demo)")
    p.add_argument("--train-seconds", type=float, default=20.0)
    p.add_argument(
        "--bench-bytes",
        type=size,
        default=32e6,
        help="data copied per contender in step 5 (default 32MB)",
    )
    p.add_argument("--workers", type=count(0), default=2, help="loader threads (default 2)")


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(
        args.size,
        args.out,
        train_seconds=args.train_seconds,
        bench_bytes=args.bench_bytes,
        workers=args.workers,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chute", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"chute {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("info", help="fields, shapes, dtypes, sample count, bytes on disk")
    p.add_argument(
        "path", help="a chute dataset: a folder or a URL (s3://, gs://, az://, https://)"
    )
    _storage_options_argument(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("verify", help="recompute checksums of every data file")
    p.add_argument("path", help="a chute dataset: a folder, or a URL (checks its cached files)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _storage_options_argument(p)
    p.set_defaults(func=cmd_verify)

    # -- other subcommands register here (convert, bench, demo) --
    p = sub.add_parser(
        "convert",
        help="convert arrays, tables, images or shards into a chute dataset",
        description=CONVERT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("src", help="a file, a folder, or a glob / brace pattern of files (see below)")
    p.add_argument("dst", help="the dataset to write: a new folder (NAME.chute) or a URL")
    p.add_argument("--fields", help="fields to keep, comma-separated; old=new renames")
    p.add_argument("--overwrite", action="store_true", help="replace dst if it exists")
    p.add_argument(
        "--workers",
        type=count(0),
        help="threads: arrays and tables read ahead (default 1; 0: in the writing thread); "
        "images are encoded (default one per CPU)",
    )
    p.add_argument(
        "--processes",
        type=count(1),
        help="Parquet, Arrow IPC, WebDataset files: convert in N processes, one part each",
    )
    p.add_argument(
        "--part-size",
        type=count(1),
        metavar="N",
        help="write parts of at most N samples (default: one part; about 128 MiB for a URL)",
    )
    p.add_argument("--split-compound", action="store_true", help="compound members as fields")
    p.add_argument(
        "--on-error",
        choices=["raise", "skip"],
        help="images and shards: an undecodable image stops (raise, default) or is left out "
        "and listed in the metadata (skip)",
    )
    p.add_argument(
        "--max-side", type=count(1), help="images: shrink so the longer side is at most this"
    )
    p.add_argument(
        "--quality", type=count(1), help="images: JPEG quality of re-encoded images (default 90)"
    )
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="image folders: keep class folders without images",
    )
    p.add_argument(
        "--nulls",
        choices=["error", "fill"],
        help="tables: a null is an error naming file, row and column (default), or is filled "
        "(0, NaN, empty) and counted in the metadata",
    )
    p.add_argument(
        "--types",
        metavar="COL=TYPE,...",
        help="JSONL / CSV: Arrow types of some columns (e.g. id=string,score=float32), when the "
        "first rows would mislead",
    )
    p.add_argument(
        "--images",
        metavar="COL,...",
        help="tables: columns of image file paths, stored as images (a CSV manifest)",
    )
    p.add_argument(
        "--image-root",
        help="tables: the folder image paths are relative to (default: the table's folder); "
        "paths leading out of it are refused",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("upload", help="copy a local dataset to a URL (s3://, gs://, az://)")
    p.add_argument("src", help="a local chute dataset")
    p.add_argument("url", help="e.g. s3://bucket/path/train.chute")
    p.add_argument("--compression", choices=["zstd"], help="store the files zstd-compressed")
    p.add_argument("--level", type=int, default=3, help="the zstd level (default 3)")
    p.add_argument("--overwrite", action="store_true", help="replace a dataset at url")
    _transfer_arguments(p, workers=8)
    p.set_defaults(func=cmd_upload)

    p = sub.add_parser("download", help="copy a dataset at a URL into a local folder")
    p.add_argument("url", help="e.g. s3://bucket/path/train.chute")
    p.add_argument("dst", help="the local folder to write (NAME.chute)")
    p.add_argument("--overwrite", action="store_true", help="replace dst if it exists")
    _transfer_arguments(p, workers=4)
    p.set_defaults(func=cmd_download)

    p = sub.add_parser("bench", help=f"{BENCH_CONTENDERS} on your data: table, plot")
    _bench_arguments(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("demo", help="the whole story in one command, on generated CIFAR-like data")
    _demo_arguments(p)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            # A warning is a message for the user here (an array left out of a convert), not
            # for a developer: one line, without the library's file and line number.
            warnings.showwarning = lambda message, *_, **__: print(
                f"chute {args.command}: warning: {message}", file=sys.stderr
            )
            return int(args.func(args) or 0)
    except ChuteError as exc:
        print(f"chute {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
