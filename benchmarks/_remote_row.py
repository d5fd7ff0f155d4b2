"""One row of ``benchmarks/remote.py``, run as a subprocess, possibly by another venv's Python
(MosaicML Streaming and LitData need other numpy versions than chute): write the samples with
the library's own writer to the S3 server, then read two epochs through its loader.

Imports only numpy, torch, boto3 and the library of the row, so it runs in any of the venvs.
It prints ``@read``, ``@cold`` and ``@warm`` as each phase starts or ends (the parent snapshots
the server's byte counter there) and ``@result {json}`` last.

``python _remote_row.py LIB URL CACHE_DIR DATA_DIR --batch-size 256 --workers 2 --part-samples N``
LIB: ``chute``, ``chute-local`` (URL is then a folder), ``streaming`` or ``litdata``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

Epoch = Callable[[], Iterable[Any]]  # one pass over the data, yielding batches
Row = tuple[float, Epoch]  # when opening started, and the epochs
OPENED: list[float] = []  # seconds from the start of opening to a dataset object


def mark(phase: str) -> None:
    print(f"@{phase}", flush=True)


def _bucket_key(url: str) -> tuple[str, str]:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key


def _upload_folder(folder: Path, url: str) -> None:
    """Upload every file of ``folder`` under ``url`` (LitData's writer writes locally)."""
    import boto3

    bucket, prefix = _bucket_key(url)
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder)}")


# -- chute -------------------------------------------------------------------------------------


def chute_row(args: argparse.Namespace, images: np.ndarray, labels: np.ndarray) -> Row:
    import chute

    if args.lib == "chute":
        chute.write(args.url, {"image": images, "label": labels}, part_size=args.part_samples)
    mark("read")
    t0 = time.perf_counter()
    remote = args.lib == "chute"
    ds = chute.open(args.url, cache_dir=args.cache_dir) if remote else chute.open(args.url)
    OPENED.append(time.perf_counter() - t0)
    loader = chute.Loader(ds, batch_size=args.batch_size, shuffle="parts", num_workers=args.workers)
    epochs = iter(range(1 << 30))

    def one_epoch() -> Iterable[Any]:
        loader.set_epoch(next(epochs))
        return loader

    return t0, one_epoch


# -- MosaicML Streaming ------------------------------------------------------------------------


def _stub_torchvision() -> None:
    """``import streaming`` imports torchvision for its vision datasets (unused here). The
    CPU torch wheel of this machine has no matching torchvision: when it is missing, stand in
    the two names that import needs."""
    from importlib.machinery import ModuleSpec
    from importlib.util import module_from_spec

    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError, OSError):  # missing, or built for another torch
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        names = ["", ".datasets", ".transforms", ".transforms.functional"]
        tv, datasets, transforms, functional = (
            module_from_spec(ModuleSpec(f"torchvision{n}", None)) for n in names
        )
        datasets.VisionDataset = object  # type: ignore[attr-defined]
        functional.to_tensor = None  # type: ignore[attr-defined]
        tv.datasets, tv.transforms, transforms.functional = datasets, transforms, functional  # type: ignore[attr-defined]
        sys.modules.update(
            {
                "torchvision": tv,
                "torchvision.datasets": datasets,
                "torchvision.transforms": transforms,
                "torchvision.transforms.functional": functional,
            }
        )


def streaming_row(args: argparse.Namespace, images: np.ndarray, labels: np.ndarray) -> Row:
    import torch

    _stub_torchvision()
    from streaming import MDSWriter, StreamingDataset

    os.environ["S3_ENDPOINT_URL"] = os.environ["AWS_ENDPOINT_URL"]  # streaming's endpoint knob
    columns = {"image": "ndarray:uint8:3,32,32", "label": "int64"}
    limit = args.part_samples * (images[0].nbytes + 64)  # ~ the same shard size as chute's parts
    local = str(Path(args.cache_dir) / "mds-written")  # its staging, in the measured folder
    with MDSWriter(out=(local, args.url), columns=columns, size_limit=limit) as w:
        for img, lab in zip(images, labels, strict=True):
            w.write({"image": img, "label": int(lab)})
    mark("read")
    t0 = time.perf_counter()
    ds = StreamingDataset(
        remote=args.url,
        local=args.cache_dir,
        batch_size=args.batch_size,
        shuffle=True,
        num_canonical_nodes=1,
    )
    OPENED.append(time.perf_counter() - t0)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers)
    return t0, lambda: loader  # the dataset counts its epochs itself


# -- LitData -----------------------------------------------------------------------------------


def litdata_row(args: argparse.Namespace, images: np.ndarray, labels: np.ndarray) -> Row:
    import litdata
    import obstore.store

    # LitData 0.2.76 downloads chunks with obstore, built without allow_http: it refuses an
    # http:// endpoint (BadScheme). Allow it here (a real S3 endpoint is https).
    s3store = obstore.store.S3Store

    def s3store_http(*a: Any, client_options: dict | None = None, **kw: Any) -> Any:
        return s3store(*a, client_options={**(client_options or {}), "allow_http": True}, **kw)

    obstore.store.S3Store = s3store_http  # type: ignore[misc,assignment]
    from litdata.streaming.writer import BinaryWriter

    local = Path(args.cache_dir).parent / "litdata-written"
    writer = BinaryWriter(str(local), chunk_size=args.part_samples)
    for i, (img, lab) in enumerate(zip(images, labels, strict=True)):
        writer.add_item(i, {"image": img, "label": lab[()]})
    writer.done()
    writer.merge()
    _upload_folder(local, args.url)
    mark("read")
    t0 = time.perf_counter()
    ds = litdata.StreamingDataset(
        input_dir=args.url,
        cache_dir=args.cache_dir,
        shuffle=True,
        storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]},
    )
    OPENED.append(time.perf_counter() - t0)
    loader = litdata.StreamingDataLoader(ds, batch_size=args.batch_size, num_workers=args.workers)
    return t0, lambda: loader


ROWS: dict[str, Callable[..., Row]] = {
    "chute": chute_row,
    "chute-local": chute_row,
    "streaming": streaming_row,
    "litdata": litdata_row,
}


def run_epoch(epoch: Epoch, t0: float) -> dict[str, float]:
    first = None
    samples = 0
    for batch in epoch():
        if first is None:
            first = time.perf_counter() - t0
        samples += len(batch["label"])
    seconds = time.perf_counter() - t0
    return {"first_batch_s": first or seconds, "seconds": seconds, "samples": samples}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("lib", choices=sorted(ROWS))
    ap.add_argument("url")
    ap.add_argument("cache_dir")
    ap.add_argument("data_dir")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--part-samples", type=int, default=2560)
    ap.add_argument("--warm-epochs", type=int, default=3)
    args = ap.parse_args()
    images = np.load(Path(args.data_dir) / "image.npy")
    labels = np.load(Path(args.data_dir) / "label.npy")
    t = time.perf_counter()
    t0, epoch = ROWS[args.lib](args, images, labels)
    write_s = t0 - t
    cold = run_epoch(epoch, t0)  # includes opening: the dataset was created at t0
    mark("cold")
    warm = [run_epoch(epoch, time.perf_counter()) for _ in range(args.warm_epochs)]
    mark("warm")
    result = {"write_s": write_s, "open_s": OPENED[0], "cold": cold, "warm": warm}
    if args.lib == "chute":  # the baseline of the first batch, in this same process
        result["one_get_s"] = one_get(args.url, "part-00000/image.npy")
    print("@result " + json.dumps(result), flush=True)


def one_get(url: str, relpath: str, repeat: int = 3) -> float:
    """Seconds for one GET of ``relpath`` under ``url`` by a new client (median of
    ``repeat``): what a process pays for one part before it can read from it."""
    from chute.store import Store

    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        Store(url).get_bytes(relpath)
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


if __name__ == "__main__":
    main()
