"""A real local AWS for tests: moto's server on a loopback port, reached by boto3 over HTTP
through AWS_ENDPOINT_URL, exactly as hyperlaunch reaches AWS. Never hand-written responses.

Use the `aws` fixture: it starts one server per test process, empties its state before each
test, and sets the environment (endpoint, fake credentials, region) for the test and for any
process the test starts."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

REGION = "us-west-2"
ACCOUNT = "123456789012"
"""moto's default account id."""


@dataclass(frozen=True)
class LocalAws:
    endpoint: str
    region: str = REGION
    account: str = ACCOUNT

    def client(self, service: str):  # noqa: ANN201 - a boto3 client
        import boto3

        return boto3.client(service, region_name=self.region, endpoint_url=self.endpoint)

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST", data=b"")
        urllib.request.urlopen(request, timeout=10).close()


@pytest.fixture(scope="session")
def _moto_server() -> Iterator[str]:
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws(_moto_server: str, monkeypatch: pytest.MonkeyPatch) -> LocalAws:
    local = LocalAws(endpoint=_moto_server)
    local.reset()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", local.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", local.region)
    monkeypatch.setenv("AWS_REGION", local.region)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return local
