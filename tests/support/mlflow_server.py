"""A real MLflow tracking server for tests: `mlflow server` on loopback, a sqlite backend and
artifacts in a temporary folder, stopped (its whole process group) when the block ends.

    with mlflow_server(tmp_path) as uri:        # http://127.0.0.1:<free port>
        client = MlflowClient(uri)

Needs the `mlflow` package (the server is not part of mlflow-skinny)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.support.free_port import free_port

STARTUP_TIMEOUT_S = 60.0
"""The server imports all of mlflow before it answers: seconds on a busy machine."""


@contextlib.contextmanager
def mlflow_server(folder: Path, *, timeout_s: float = STARTUP_TIMEOUT_S) -> Iterator[str]:
    """Start `mlflow server` with its store under `folder`; yield its URI once /health answers."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}", "--artifacts-destination", str(folder / "artifacts"),
    ]
    log = (folder / "server.log").open("wb")
    # No job execution (GenAI jobs this project never runs): with it, each start leaves its
    # job store in a folder of /dev/shm, which nothing removes (RAM, across every run).
    env = {**os.environ, "HOME": str(folder), "MLFLOW_TRACKING_URI": "", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_until_healthy(server, uri, timeout_s, folder / "server.log")
        yield uri
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)  # the server's workers are its children
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def _wait_until_healthy(server: subprocess.Popen[bytes], uri: str, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {server.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"mlflow server at {uri} did not answer /health within {timeout_s:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")
