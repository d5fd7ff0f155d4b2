"""Hostile caches and servers: symlinks planted in the cache folder never send a write or a
read elsewhere; a server's answers (size, length, time) never exceed what the manifest says.
Real files in tmp_path, moto on 127.0.0.1, and small hostile HTTP servers in threads."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")

from _reliability import recorded
from _s3server import BUCKET, S3Server, small_dataset

import chute
from chute.errors import (
    ArgumentError,
    CacheError,
    ChecksumError,
    FormatError,
    RemoteError,
)
from chute.manifest_file import MAX_MANIFEST_BYTES
from chute.reader.remote import RemoteDataset
from chute.store import RemoteCache, Store
from chute.store.budget import BUDGET, Budget
from chute.transfer import download, upload


@pytest.fixture
def url(s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A small 3-part dataset uploaded to the test server."""
    name = request.node.name.replace("[", "_").replace("]", "")
    url = f"s3://{BUCKET}/{name}/ds.chute"
    upload(small_dataset(tmp_path / "local.chute"), url)
    return url


_row = recorded(
    {
        "test_part_folder_symlink_gets_no_download": (
            "cache: symlinked part folder",
            "part-00001 in the cache is a link to another user's folder; pin, ds[i]",
            "CacheError naming it; the other folder untouched",
        ),
        "test_symlinks_in_bookkeeping_are_refused": (
            "cache: symlinked bookkeeping",
            "a link (to another folder or file) in place of a bookkeeping path",
            "CacheError naming it; its target untouched",
        ),
        "test_symlinks_at_temporary_names_are_never_opened": (
            "cache: links at temporary names",
            "links planted at identity.json.tmp-PID and chute.json.tmp-PID, then a rebuild",
            "new O_EXCL random names used; the targets untouched",
        ),
        "test_symlink_file_in_the_cache_is_not_read": (
            "cache: symlinked data file",
            "a cached x.npy replaced by a link to a copy of the right size",
            "CacheError: not a regular file; never read",
        ),
        "test_budget_eviction_never_follows_a_link": (
            "cache: links under a shared budget",
            "a planted dataset folder whose part folder, data file and the folder itself are "
            "links to another user's files, and a linked .chute-budget; a budget of 0 bytes",
            "the real dataset's unpinned files evicted, links neither followed nor counted; "
            "CacheError for the linked bookkeeping; the targets untouched",
        ),
        "test_cache_folder_is_private": (
            "cache: permissions",
            "a new cache folder and part folder",
            "created 0700",
        ),
        "test_downloaded_dataset_keeps_the_umasks_modes": (
            "download: permissions",
            "chute download under umask 022",
            "folders 0755, files 0644 (the cache's own are 0700 / 0600)",
        ),
        "test_cache_folder_of_another_user_is_refused": (
            "cache: another user's folder",
            "the cache folder chowned to uid 4321",
            "CacheError naming the owner",
        ),
        "test_cache_folder_itself_a_symlink_is_refused": (
            "cache: the folder a symlink",
            "the cache folder is a link to another folder",
            "CacheError; the target untouched",
        ),
        "test_bookkeeping_of_the_wrong_type": (
            "cache: bookkeeping of the wrong type",
            "identity.json a JSON list, a folder, 2 MB",
            "CacheError naming identity.json (was AttributeError / IsADirectoryError)",
        ),
        "test_manifest_with_a_huge_content_length_is_refused_unread": (
            "server: huge Content-Length",
            "chute.json answered with Content-Length 2^62 (aborted the interpreter before)",
            "FormatError before any byte is read",
        ),
        "test_manifest_that_never_ends_is_cut_at_the_cap": (
            "server: endless manifest",
            "chute.json followed by zeros that never end (Content-Length 1 TiB)",
            "FormatError at the 64 MiB cap; no memory held",
        ),
        "test_part_that_never_ends_is_cut_at_its_size": (
            "server: endless part",
            "a part file followed by zeros that never end, plain and zstd",
            "refused on its size, twice, then ChecksumError; nothing left in the cache",
        ),
        "test_part_with_junk_appended_is_refused_before_its_body": (
            "server: junk appended",
            "a part file with 8 MiB appended (was downloaded whole, twice)",
            "refused on Content-Length before the body, then ChecksumError",
        ),
        "test_zstd_bomb_is_cut_at_the_file_size": (
            "server: zstd bomb",
            "a crafted manifest and a 32 KB zstd frame inflating to 1 GiB, cache_limit 1 MB",
            "cut at the file's size: ChecksumError saying so, never the limit blamed",
        ),
        "test_stalled_server_is_a_remote_error_naming_the_object": (
            "server: stall",
            "a part sent a byte every 20 ms, or never, timeout 1 s, 1 retry",
            "RemoteError naming the object after 2 attempts",
        ),
        "test_bad_timeouts_are_refused": (
            "server: timeout option",
            "storage_options timeout of a bad value",
            "ArgumentError",
        ),
        "test_server_that_stops_answering_mid_epoch_fails_the_loader": (
            "server: stops answering mid-epoch",
            "Loader (2 threads) over 3 parts; the server never answers for part 2",
            "RemoteError naming the object; parts 0 and 1 delivered; no hang",
        ),
        "test_redirect_to_another_host_gets_no_session_token": (
            "server: redirect to another host",
            "chute.json answered 302 to another host, AWS_SESSION_TOKEN set",
            "RemoteError naming the host, not followed: the token never reaches it (was "
            "sent along: obstore follows redirects)",
        ),
        "test_manifest_metadata_that_is_not_strict_json": (
            "server: metadata not strict JSON",
            "a remote chute.json whose metadata holds NaN or -Infinity",
            "FormatError naming the manifest and 'metadata' (was SchemaError 'metadata must "
            "be JSON-serialisable', as if the reader had written it)",
        ),
        "test_changed_cached_file_is_refetched_with_verify_cache": (
            "cache: a byte changed in place",
            "a cached part file changed after download; default, then verify_cache=True",
            "default reads it (documented); verify_cache refetches it once, read correct",
        ),
        "test_verify_url_refetches_a_changed_cached_file": (
            "cache: chute verify URL",
            "a cached part file changed after download",
            "verify downloads it again; the next read is correct",
        ),
    }
)


def cache_for(url: str, tmp_path: Path) -> RemoteCache:
    return RemoteCache(Store(url, retries=1, backoff=0.01), tmp_path / "cache")


def victim(tmp_path: Path) -> Path:
    """A folder of someone else's files that the cache must never touch."""
    folder = tmp_path / "victim"
    folder.mkdir(exist_ok=True)
    for name in ("x.npy", "label.npy", "chute.json", "identity.json", "keep"):
        (folder / name).write_text("precious")
    return folder


def untouched(folder: Path) -> bool:
    return (
        all(f.read_text() == "precious" for f in folder.iterdir())
        and len(list(folder.iterdir())) == 5
    )


# ----------------------------------------------------------------- cache paths


def test_part_folder_symlink_gets_no_download(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    cache.open()
    other = victim(tmp_path)
    (cache.folder / "part-00001").symlink_to(other, target_is_directory=True)
    cache.pin_part(0).release()  # other parts work
    with pytest.raises(CacheError, match=r"part-00001.* symlink or not a folder"):
        cache.pin_part(1)
    assert untouched(other)
    with (
        pytest.raises(CacheError, match="part-00001"),
        chute.open(url, cache_dir=tmp_path / "cache") as ds,
    ):
        ds[150]
    assert untouched(other)


@pytest.mark.parametrize(
    "name",
    [
        ".chute-cache",
        ".chute-cache/identity.json",
        ".chute-cache/locks",
        ".chute-cache/inuse",
        ".chute-cache/folder.lock",
        ".chute-cache/version.lock",
    ],
)
def test_symlinks_in_bookkeeping_are_refused(url: str, tmp_path: Path, name: str) -> None:
    cache = cache_for(url, tmp_path)
    cache.folder.mkdir(parents=True)
    (cache.folder / ".chute-cache").mkdir()
    other = victim(tmp_path)
    link = cache.folder / name
    if link.exists():
        link.rmdir()
    target = other / "identity.json" if name.endswith(("json", "lock")) else other
    link.symlink_to(target)
    with pytest.raises(CacheError, match=r"symlink|not a regular file"):
        cache.open()
        cache.pin_part(0)
    assert untouched(other)


def test_symlinks_at_temporary_names_are_never_opened(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    cache.open()
    cache.close()
    other = victim(tmp_path)
    pid = os.getpid()
    record = cache.folder / ".chute-cache" / "identity.json"
    record.write_text(json.dumps({"url": url, "manifest_xxh3": "0"}))  # an older version: rebuilt
    (cache.folder / ".chute-cache" / f"identity.json.tmp-{pid}").symlink_to(other / "identity.json")
    cache_for(url, tmp_path).open()
    (cache.folder / "chute.json").unlink()  # rewritten at the next open
    (cache.folder / f"chute.json.tmp-{pid}").symlink_to(other / "chute.json")
    cache_for(url, tmp_path).open()
    assert untouched(other)
    assert json.loads(record.read_text())["url"] == url
    assert json.loads((cache.folder / "chute.json").read_text())["parts"]


def test_symlink_file_in_the_cache_is_not_read(url: str, tmp_path: Path) -> None:
    """A link in place of a cached file (to a file of the right size) is not used."""
    cache = cache_for(url, tmp_path)
    cache.open()
    with cache.pin_part(0) as pin:
        real = pin.paths[0]
    copy = tmp_path / "elsewhere.npy"
    copy.write_bytes(real.read_bytes())
    real.unlink()
    real.symlink_to(copy)
    with pytest.raises(CacheError, match="not a regular file"):
        cache.pin_part(0)


def test_budget_eviction_never_follows_a_link(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    cache.open()
    for i in range(3):
        cache.pin_part(i).release()
    other = victim(tmp_path)
    planted = cache.root / "planted-0123456789abcdef"
    (planted / ".chute-cache").mkdir(parents=True)
    (planted / ".chute-cache" / "identity.json").write_text("{}")
    (planted / "part-00000").symlink_to(other)
    (planted / "x.npy").symlink_to(other / "x.npy")
    (cache.root / "linked-0123456789abcdef").symlink_to(other)
    budget = Budget(cache.root, 0)
    assert budget.make_room(0) > 0  # the real dataset's files, none of them pinned
    assert budget.usage() == 0 and untouched(other)
    assert not list(cache.folder.glob("part-*/*.npy"))
    (cache.root / BUDGET).symlink_to(other)
    with pytest.raises(CacheError, match="symlink"), budget.reserve(10):
        pass
    assert untouched(other)


def test_cache_folder_is_private(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    cache.open()
    cache.pin_part(0).release()
    assert cache.folder.stat().st_mode & 0o777 == 0o700
    assert (cache.folder / "part-00000").stat().st_mode & 0o077 == 0


def test_downloaded_dataset_keeps_the_umasks_modes(url: str, tmp_path: Path) -> None:
    """``chute download`` stages through the cache's code but makes a dataset to share: its
    folders and files get the umask's modes, not the cache's private ones."""
    old = os.umask(0o022)
    try:
        out = download(url, tmp_path / "copy.chute")
    finally:
        os.umask(old)
    assert (out / "part-00000").stat().st_mode & 0o777 == 0o755
    assert (out / "part-00000" / "x.npy").stat().st_mode & 0o777 == 0o644


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_cache_folder_of_another_user_is_refused(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    cache.folder.mkdir(parents=True)
    os.chown(cache.folder, 4321, 4321)
    with pytest.raises(CacheError, match="belongs to user id 4321"):
        cache.open()


def test_cache_folder_itself_a_symlink_is_refused(url: str, tmp_path: Path) -> None:
    cache = cache_for(url, tmp_path)
    other = victim(tmp_path)
    cache.folder.parent.mkdir(parents=True)
    cache.folder.symlink_to(other)
    with pytest.raises(CacheError, match="symlink"):
        cache.open()
    assert untouched(other)


@pytest.mark.parametrize("kind", ["list", "folder", "huge"])
def test_bookkeeping_of_the_wrong_type(url: str, tmp_path: Path, kind: str) -> None:
    cache = cache_for(url, tmp_path)
    cache.open()
    record = cache.folder / ".chute-cache" / "identity.json"
    record.unlink()
    if kind == "list":
        record.write_text("[1, 2]")
    elif kind == "folder":
        record.mkdir()
    else:
        record.write_bytes(b" " * (2 << 20))
    with pytest.raises(CacheError, match=r"identity\.json"):
        cache_for(url, tmp_path).open()


# ------------------------------------------------------------ a hostile server

MiB = 1 << 20


def key_of(url: str, rel: str) -> str:
    return f"{url.split(BUCKET + '/')[1]}/{rel}"


def endless(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], Iterator[bytes]]:
    """The object, then zeros that never end (its Content-Length says 1 TiB)."""

    def chunks() -> Iterator[bytes]:
        yield body
        for _ in range(1 << 14):  # 16 GiB: far beyond any bound, and still not forever
            yield bytes(MiB)

    return {**headers, "Content-Length": str(1 << 40)}, chunks()


def test_manifest_with_a_huge_content_length_is_refused_unread(url: str, s3: S3Server) -> None:
    def huge(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], list[bytes]]:
        return {**headers, "Content-Length": str(1 << 62)}, [body]

    s3.answer[key_of(url, "chute.json")] = huge
    with pytest.raises(FormatError, match=r"chute\.json is not a chute manifest.*store says"):
        chute.open(url)


def test_manifest_that_never_ends_is_cut_at_the_cap(url: str, s3: S3Server) -> None:
    key = key_of(url, "chute.json")
    s3.answer[key] = endless
    with pytest.raises(FormatError, match=r"the store says 1099511627776 bytes"):
        chute.open(url)
    assert s3.sent[key] < 2 * MAX_MANIFEST_BYTES  # cut at the cap, not read to the end


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_part_that_never_ends_is_cut_at_its_size(
    s3: S3Server,
    tmp_path: Path,
    compression: str | None,
) -> None:
    url = f"s3://{BUCKET}/endless-{compression}/ds.chute"
    upload(small_dataset(tmp_path / "local.chute"), url, compression=compression)
    rel = "part-00001/x.npy" + (".zst" if compression else "")
    s3.answer[key_of(url, rel)] = endless
    with chute.open(url, cache_dir=tmp_path / "cache") as ds:
        assert int(ds[0]["label"]) >= 0
        with pytest.raises(ChecksumError, match=r"part-00001/x\.npy.*store says 1099511627776"):
            ds[150]
        assert not list((ds.cache.folder / "part-00001").glob("*x.npy*"))
    assert s3.sent[key_of(url, rel)] < 2 * (64 * MiB)  # two tries, each cut within a chunk


def test_part_with_junk_appended_is_refused_before_its_body(url: str, s3: S3Server) -> None:
    key = key_of(url, "part-00001/x.npy")

    def junk(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], list[bytes]]:
        return {**headers, "Content-Length": str(len(body) + 8 * MiB)}, [body, bytes(8 * MiB)]

    s3.answer[key] = junk
    with chute.open(url) as ds, pytest.raises(ChecksumError, match="the store says"):
        ds[150]
    assert s3.sent[key] < 2 * 9 * MiB  # the server's own writes; the client read none of it


def test_zstd_bomb_is_cut_at_the_file_size(s3: S3Server, tmp_path: Path) -> None:
    """A crafted manifest whose stored size matches a small frame that inflates to 1 GiB: the
    decompression stops at the file's size, and a cache_limit is not blamed."""
    import zstandard

    url = f"s3://{BUCKET}/bomb/ds.chute"
    upload(small_dataset(tmp_path / "local.chute"), url, compression="zstd")
    bomb = zstandard.ZstdCompressor(level=19).compress(bytes(1 << 30))
    store = Store(url)
    manifest = json.loads(store.get_bytes("chute.json"))
    manifest["parts"][1]["files"]["x.npy"]["stored"]["bytes"] = len(bomb)
    store.put_bytes("chute.json", json.dumps(manifest).encode())
    store.put_bytes("part-00001/x.npy.zst", bomb)
    with chute.open(url, cache_dir=tmp_path / "cache", cache_limit="1MB") as ds:
        with pytest.raises(ChecksumError, match=r"decompresses to over \d+ bytes"):
            ds[150]
        leftovers = [p.stat().st_size for p in ds.cache.folder.rglob("*x.npy*")]
    assert all(size < 1 << 20 for size in leftovers)


@pytest.mark.parametrize("how", ["trickle", "silent"])
def test_stalled_server_is_a_remote_error_naming_the_object(
    url: str,
    s3: S3Server,
    tmp_path: Path,
    how: str,
) -> None:
    key = key_of(url, "part-00002/x.npy")
    stop = threading.Event()

    def slow(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], Iterator[bytes]]:
        def chunks() -> Iterator[bytes]:
            if how == "silent":
                stop.wait(60)
            for byte in body:  # a byte at a time, each 20 ms apart: 50 B/s
                if stop.wait(0.02):
                    return
                yield bytes([byte])

        return headers, chunks()

    s3.answer[key] = slow
    store = Store(url, {"timeout": "1s"}, retries=1, backoff=0.01)
    try:
        ds = RemoteDataset(store, cache_dir=tmp_path / "cache")
        with pytest.raises(RemoteError, match=r"part-00002/x\.npy.*after 2 attempt"):
            ds[250]
    finally:
        stop.set()


@pytest.mark.parametrize("value", [0, -1, "soon", True])
def test_bad_timeouts_are_refused(url: str, value: object) -> None:
    with pytest.raises(ArgumentError, match="timeout must be a positive number"):
        Store(url, {"timeout": value})


def test_server_that_stops_answering_mid_epoch_fails_the_loader(
    url: str,
    s3: S3Server,
    tmp_path: Path,
) -> None:
    """Parts 0 and 1 come, then the server accepts requests and never answers: the loader's
    pass ends in a RemoteError naming the object (pytest's timeout catches a hang)."""
    stop = threading.Event()

    def silent(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], Iterator[bytes]]:
        def chunks() -> Iterator[bytes]:
            stop.wait(120)
            yield body

        return headers, chunks()

    for name in ("x.npy", "label.npy", "tokens.values.npy", "tokens.offsets.npy"):
        s3.answer[key_of(url, f"part-00002/{name}")] = silent
    ds = RemoteDataset(
        Store(url, {"timeout": 1}, retries=1, backoff=0.01), cache_dir=tmp_path / "c"
    )
    got = []
    try:
        with pytest.raises(RemoteError, match=r"part-00002/.*after 2 attempt"):
            for batch in chute.Loader(ds, 50, num_workers=2):
                got.append(len(batch["label"]))
    finally:
        stop.set()
    assert sum(got) <= 200  # parts 0 and 1 were read; part 2 never came


def test_redirect_to_another_host_gets_no_session_token(
    url: str,
    s3: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import http.server

    seen: list[dict[str, str]] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_SESSION_TOKEN", "SESSION-SECRET")
    where = f"http://localhost:{other.server_address[1]}/stolen"
    s3.answer[key_of(url, "chute.json")] = lambda h, b: (
        {":status": "302 Found", "Location": where, "Content-Length": "0"},
        [],
    )
    try:
        with pytest.raises(RemoteError, match=r"302 redirecting to localhost:\d+; chute does not"):
            chute.open(url, cache_dir=tmp_path / "c")
    finally:
        other.shutdown()
        other.server_close()
    assert seen == []  # never followed
    assert all("SESSION-SECRET" not in v for h in seen for v in h.values())


@pytest.mark.parametrize("metadata", ['{"v": NaN}', '{"v": [1, -Infinity]}'])
def test_manifest_metadata_that_is_not_strict_json(url: str, tmp_path: Path, metadata: str) -> None:
    store = Store(url)
    manifest = json.loads(store.get_bytes("chute.json"))
    manifest["metadata"] = "@"
    store.put_bytes("chute.json", json.dumps(manifest).replace('"@"', metadata).encode())
    with pytest.raises(FormatError, match=r"chute\.json: its 'metadata' is not strict JSON"):
        chute.open(url, cache_dir=tmp_path / "c")


# ------------------------------------------------------------ cached files changed in place


def flip_cached_byte(cache_folder: Path) -> Path:
    """Change the last byte of part 1's x.npy in the cache (a float32 of sample 199)."""
    file = cache_folder / "part-00001" / "x.npy"
    raw = bytearray(file.read_bytes())
    raw[-1] ^= 0x40
    file.write_bytes(bytes(raw))
    return file


def test_changed_cached_file_is_refetched_with_verify_cache(
    url: str,
    s3: S3Server,
    tmp_path: Path,
) -> None:
    cache_dir = tmp_path / "cache"
    with chute.open(url, cache_dir=cache_dir) as ds:
        assert float(ds[199]["x"][-1]) == 199.0
        folder = ds.cache.folder
    flip_cached_byte(folder)
    with chute.open(url, cache_dir=cache_dir) as ds:  # the documented default: size only
        assert float(ds[199]["x"][-1]) != 199.0
    key = key_of(url, "part-00001/x.npy")
    before = s3.gets(key)
    with chute.open(url, cache_dir=cache_dir, verify_cache=True) as ds:
        assert float(ds[199]["x"][-1]) == 199.0
        assert float(ds[150]["x"][0]) == 150.0  # verified once per process: no new GET
    assert s3.gets(key) == before + 1


def test_verify_url_refetches_a_changed_cached_file(
    url: str,
    s3: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache_dir = tmp_path / "cache"
    with chute.open(url, cache_dir=cache_dir) as ds:
        ds.fetch()
        folder = ds.cache.folder
    flip_cached_byte(folder)
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(cache_dir))
    chute.verify(url)
    with chute.open(url, cache_dir=cache_dir) as ds:
        assert float(ds[199]["x"][-1]) == 199.0
