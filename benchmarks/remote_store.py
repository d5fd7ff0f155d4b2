"""chute.store pieces side by side, one run, against a local moto S3 server on 127.0.0.1:
zstd ratio and (de)compression speed on token-like and image-like data, and a part's cold
fetch through the cache (plain and zstd) next to a local copy of the same bytes, the warm
pin, and the xxh3 check's share.

moto is a Python server: absolute download speeds are moto's, not S3's; the ratios between
rows of one run are what this measures. ``python benchmarks/remote_store.py [--mb 32]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "store"))

from _common import table, write_json
from chute.verify import _file_checksum

import chute
from chute.store import RemoteCache, Store
from chute.transfer import upload


def data(kind: str, nbytes: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if kind == "tokens":  # Zipf-like ids of a 50k vocabulary, int32
        ids = np.minimum(rng.zipf(1.2, nbytes // 4), 50_000).astype(np.int32)
        return {"tokens": ids.reshape(-1, 512)}
    # smooth 64x64x3 uint8 "images": gradients plus noise (decoded photos compress similarly
    # badly-to-moderately; JPEG bytes would not compress at all)
    n = nbytes // (64 * 64 * 3)
    base = np.linspace(0, 255, 64, dtype=np.float32)
    img = base[None, :, None, None] + base[None, None, :, None] * 0.5
    noise = rng.normal(0, 8, (n, 64, 64, 3)).astype(np.float32)
    return {"image": np.clip(img + noise, 0, 255).astype(np.uint8)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=32)
    args = ap.parse_args()
    import zstandard
    from _s3server import BUCKET, S3Server

    server = S3Server()
    server.create_bucket()
    os.environ.update(
        AWS_ENDPOINT_URL=server.endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_REGION="us-east-1",
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("tokens", "image"):
            local = chute.write(Path(tmp) / f"{kind}.chute", data(kind, args.mb << 20))
            (file,) = [p for p in local.glob("*.npy")]
            raw = file.read_bytes()
            t = time.perf_counter()
            comp = zstandard.ZstdCompressor(level=3).compress(raw)
            c_s = time.perf_counter() - t
            t = time.perf_counter()
            zstandard.ZstdDecompressor().decompress(comp)
            d_s = time.perf_counter() - t
            t = time.perf_counter()
            _file_checksum(file)
            h_s = time.perf_counter() - t
            t = time.perf_counter()
            shutil.copyfile(file, Path(tmp) / "copy.npy")
            copy_s = time.perf_counter() - t
            mb = len(raw) / 1e6
            row = {
                "data": kind,
                "MB": mb,
                "ratio": len(raw) / len(comp),
                "zstd_c": mb / c_s,
                "zstd_d": mb / d_s,
                "xxh3": mb / h_s,
                "local_copy": mb / copy_s,
            }
            for comp_kind in (None, "zstd"):
                url = f"s3://{BUCKET}/{kind}-{comp_kind}/ds.chute"
                upload(local, url, compression=comp_kind)
                cache = RemoteCache(Store(url), Path(tmp) / "cache")
                cache.open()
                t = time.perf_counter()
                cache.pin_part(0).release()
                cold = time.perf_counter() - t
                t = time.perf_counter()
                cache.pin_part(0).release()
                warm = time.perf_counter() - t
                row["cold_" + (comp_kind or "plain")] = mb / cold
                row["warm_pin_ms"] = warm * 1e3
            rows.append(row)
    server.stop()
    cols = [
        ("data", "data", "s"),
        ("MB", "MB", ".1f"),
        ("ratio", "zstd-3 ratio", ".2f"),
        ("zstd_c", "compress MB/s", ".0f"),
        ("zstd_d", "decompress MB/s", ".0f"),
        ("xxh3", "xxh3 check MB/s", ".0f"),
        ("local_copy", "local copy MB/s", ".0f"),
        ("cold_plain", "cold fetch MB/s", ".0f"),
        ("cold_zstd", "cold fetch zstd MB/s", ".0f"),
        ("warm_pin_ms", "warm pin ms", ".2f"),
    ]
    print(table(rows, cols))
    print(
        "JSON:", write_json(Path(__file__).parent / "results" / "remote_store.json", {"rows": rows})
    )


if __name__ == "__main__":
    main()
