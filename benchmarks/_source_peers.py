"""The tools ``convert_sources.py`` compares chute with, each as a user would call it.

Conversions (seconds of one run):

* ``chute_convert``: ``chute.convert(src, dst)``.
* ``hf_convert``: ``datasets.Dataset.from_parquet(src).save_to_disk(dst)`` (a fresh cache
  folder each run, so nothing is reused between runs).
* ``litdata_convert``: LitData ``optimize`` over the parquet row groups (tokens as int32
  arrays, the text as a string) or over the WebDataset shards (each JPEG's bytes, its label
  and caption), 2 worker processes, in a child process of ``--litdata PYTHON``: LitData pins
  its own dependencies, so it may live in an environment of its own.

Shuffled epochs (rows and seconds), batch 256, 2 workers, the tokens padded with 0 and the
texts a list, the same batch from every reader:

* ``chute_epoch``: ``chute.Loader(ds, batch_size=256, shuffle=True, num_workers=2, pad=0)``.
* ``hf_epoch``: ``load_from_disk(path).with_format("torch")`` in a torch ``DataLoader``
  (``shuffle=True``, 2 worker processes, ``pad_collate``).
* ``wds_epoch``: ``wds.WebDataset(shards).shuffle(1000).decode().batched(256)`` in a torch
  ``DataLoader`` (2 worker processes, each reading its own shards), over the same rows written
  as ``.tar`` shards by ``write_token_shards``.

Run as a script only as the LitData child: ``python _source_peers.py --litdata-child KIND SRC
DST REPS`` prints ``{"seconds": best}`` or ``{"skipped": why}``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch
from _common import child_json
from torch.nn.utils.rnn import pad_sequence

BATCH, WORKERS, SHUFFLE_BUFFER = 256, 2, 1000


def chute_convert(src: Path, dst: Path, **options: Any) -> float:
    import chute

    t0 = time.perf_counter()
    chute.convert(src, dst, overwrite=True, progress=False, **options)
    return time.perf_counter() - t0


def hf_convert(src: Path, dst: Path) -> float:
    import datasets

    datasets.disable_progress_bars()
    cache = dst.with_name(dst.name + ".cache")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    datasets.Dataset.from_parquet(str(src), cache_dir=str(cache)).save_to_disk(str(dst))
    seconds = time.perf_counter() - t0
    shutil.rmtree(cache)
    return seconds


def litdata_convert(python: str | None, kind: str, src: Path, dst: Path, reps: int) -> dict:
    """``{"seconds": best of reps}`` of LitData ``optimize`` (``kind``: "parquet" or
    "webdataset"), or ``{"skipped": why}``: no ``--litdata``, or it fails there."""
    if python is None:
        return {"skipped": "no --litdata PYTHON given"}
    return child_json(python, [__file__, "--litdata-child", kind, str(src), str(dst), str(reps)])


def _parquet_rows(part: tuple[str, int]) -> Iterator[dict[str, Any]]:
    """The rows of one row group: the LitData ``optimize`` function for token tables."""
    path, group = part
    t = pq.ParquetFile(path).read_row_group(group)
    tokens = t.column("tokens").combine_chunks()
    offsets, values = tokens.offsets.to_numpy(), tokens.values.to_numpy()
    for a, b, text in zip(offsets[:-1], offsets[1:], t.column("text").to_pylist(), strict=True):
        yield {"tokens": values[a:b], "text": text}


def _shard_samples(path: str) -> Iterator[dict[str, Any]]:
    """The samples of one WebDataset shard (JPEG bytes as they are, label, caption): the
    LitData ``optimize`` function for photo shards."""
    key, sample = "", {}
    with tarfile.open(path) as tar:
        for member in tar:
            name, ext = member.name.rsplit(".", 1)
            if name != key and sample:
                yield _photo(sample)
                sample = {}
            key = name
            sample[ext] = tar.extractfile(member).read()  # type: ignore[union-attr]
    if sample:
        yield _photo(sample)


def _photo(sample: dict[str, bytes]) -> dict[str, Any]:
    return {"jpg": sample["jpg"], "cls": int(sample["cls"]), "txt": sample["txt"].decode()}


def litdata_child(kind: str, src: Path, dst: Path, reps: int) -> dict:
    """In the child: best seconds of ``reps`` LitData ``optimize`` runs into fresh folders."""
    try:
        from litdata import optimize
    except ImportError as exc:
        return {"skipped": f"litdata is not importable ({exc})"}
    if kind == "parquet":
        groups = pq.ParquetFile(src).num_row_groups
        fn, inputs = _parquet_rows, [(str(src), g) for g in range(groups)]
    else:
        fn, inputs = _shard_samples, [str(p) for p in sorted(src.glob("*.tar"))]
    best = float("inf")
    for rep in range(reps):
        out = dst / f"run-{rep}"
        t0 = time.perf_counter()
        optimize(fn=fn, inputs=inputs, output_dir=str(out), num_workers=WORKERS, chunk_bytes="64MB")
        best = min(best, time.perf_counter() - t0)
        shutil.rmtree(out)
    return {"seconds": best}


def write_token_shards(src: Path, folder: Path, shards: int = 4) -> list[str]:
    """The rows of parquet ``src`` as WebDataset ``.tar`` shards (``tokens.npy``, ``txt``)."""
    import webdataset as wds

    t = pq.read_table(src)
    tokens = t.column("tokens").combine_chunks()
    offsets, values = tokens.offsets.to_numpy(), tokens.values.to_numpy()
    texts = t.column("text").to_pylist()
    folder.mkdir()
    per = -(-len(texts) // shards)
    urls = []
    for s in range(shards):
        urls.append(str(folder / f"tok-{s:03d}.tar"))
        with wds.TarWriter(urls[-1]) as sink:
            for i in range(s * per, min(len(texts), (s + 1) * per)):
                row = values[offsets[i] : offsets[i + 1]]
                sink.write({"__key__": f"{i:07d}", "tokens.npy": row, "txt": texts[i]})
    return urls


def pad_collate(rows: Iterable[tuple[Any, str]]) -> dict[str, Any]:
    """(tokens, text) pairs -> the batch every reader gives: tokens padded with 0, texts."""
    tokens, texts = zip(*rows, strict=True)
    padded = pad_sequence([torch.as_tensor(t) for t in tokens], batch_first=True)
    return {"tokens": padded, "text": list(texts)}


def _hf_collate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return pad_collate((r["tokens"], r["text"]) for r in rows)


def _epoch(batches: Iterable[dict[str, Any]]) -> tuple[int, float]:
    t0 = time.perf_counter()
    rows = sum(len(b["text"]) for b in batches)
    return rows, time.perf_counter() - t0


def chute_epoch(path: Path) -> tuple[int, float]:
    import chute

    ds = chute.open(path)
    return _epoch(chute.Loader(ds, BATCH, shuffle=True, num_workers=WORKERS, pad=0))


def hf_epoch(path: Path) -> tuple[int, float]:
    import datasets
    from torch.utils.data import DataLoader

    ds = datasets.load_from_disk(str(path)).with_format("torch")
    loader = DataLoader(
        ds, batch_size=BATCH, shuffle=True, num_workers=WORKERS, collate_fn=_hf_collate
    )
    return _epoch(loader)


def wds_epoch(urls: list[str]) -> tuple[int, float]:
    import webdataset as wds
    from torch.utils.data import DataLoader

    pipeline = (
        wds.WebDataset(urls, shardshuffle=len(urls))
        .shuffle(SHUFFLE_BUFFER)
        .decode()
        .to_tuple("tokens.npy", "txt")
        .batched(BATCH, collation_fn=pad_collate)
    )
    return _epoch(DataLoader(pipeline, batch_size=None, num_workers=WORKERS))


if __name__ == "__main__" and sys.argv[1:2] == ["--litdata-child"]:
    kind, src, dst, reps = sys.argv[2:6]
    print(json.dumps(litdata_child(kind, Path(src), Path(dst), int(reps))))
