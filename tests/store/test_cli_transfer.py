"""``chute upload`` / ``chute download`` / ``chute info`` against a real S3-protocol server
(moto) on 127.0.0.1, with the endpoint given by ``--storage-options`` alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")

from _s3server import BUCKET, S3Server

import chute
from chute.cli import main


def test_upload_and_download_with_storage_options_and_workers(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # the endpoint comes from --storage-options alone
    opts = ["--storage-options", json.dumps({"endpoint": s3.endpoint})]
    local = tmp_path / "local.chute"
    chute.write(local, {"x": np.arange(200, dtype=np.float32), "i": np.arange(200)}, part_size=50)
    url = f"s3://{BUCKET}/cli/ds.chute"
    assert main(["upload", str(local), url, "--workers", "3", "--compression", "zstd", *opts]) == 0
    assert "uploaded" in capsys.readouterr().out
    assert main(["info", url, *opts]) == 0
    assert "200 samples, 4 part(s)" in capsys.readouterr().out
    assert len({key for _, key in s3.log if key.endswith(".npy.zst")}) == 8  # 4 parts x 2
    assert main(["verify", url, "-q", *opts]) == 0
    assert "OK" in capsys.readouterr().out
    dst = tmp_path / "copy.chute"
    assert main(["download", url, str(dst), "--workers", "2", *opts]) == 0
    assert chute.open(dst).gather(np.arange(200))["i"].tolist() == list(range(200))
    assert len(chute.open(dst).parts) == 4
