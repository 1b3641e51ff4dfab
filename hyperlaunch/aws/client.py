"""Every AWS call goes through here: one way to make a boto3 client, and one mapping of what
AWS (or the absence of credentials, region or network) answers into a one-line AwsError.

boto3 is imported only when a command needs AWS, so the rest of the CLI starts without it.
boto3 honours AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_<SERVICE>): the tests point it at a
local moto server, never at AWS."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from hyperlaunch.core.errors import AwsError

T = TypeVar("T")

_CONNECT_TIMEOUT_S = 5
_READ_TIMEOUT_S = 20
_MAX_ATTEMPTS = 3


def client(service: str, *, region: str | None = None) -> Any:
    """A boto3 client for `service` in `region` (None: the AWS configuration's region), with
    short timeouts and few retries, so a CLI call without a network fails in seconds."""
    with aws_errors(f"AWS {service}"):
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=_CONNECT_TIMEOUT_S,
            read_timeout=_READ_TIMEOUT_S,
            retries={"max_attempts": _MAX_ATTEMPTS, "mode": "standard"},
        )
        session = boto3.session.Session(region_name=region or None)
        if session.region_name is None:
            raise AwsError(
                f"AWS {service}: no AWS region is set",
                hint="pass --region, or set AWS_REGION / AWS_DEFAULT_REGION, or `aws configure`",
            )
        return session.client(service, config=config)


def call(what: str, function: Callable[..., T], /, **kwargs: object) -> T:
    """`function(**kwargs)` with AWS's failures as one-line AwsErrors that start with `what`."""
    with aws_errors(what):
        return function(**kwargs)


def paginate(what: str, aws_client: Any, operation: str, key: str, /, **kwargs: object) -> list[Any]:
    """Every item under `key` across the pages of `operation` (NextToken followed by boto3)."""
    with aws_errors(what):
        paginator = aws_client.get_paginator(operation)
        return [item for page in paginator.paginate(**kwargs) for item in page.get(key, [])]


@contextmanager
def aws_errors(what: str) -> Iterator[None]:
    """Turn botocore's exceptions into AwsError("<what>: <AWS's reason>")."""
    try:
        import botocore.exceptions as bex
    except ImportError:  # pragma: no cover - boto3 is a dependency of the CLI
        raise AwsError(f"{what}: boto3 is not installed", hint="pip install boto3") from None
    try:
        yield
    except AwsError:
        raise
    except bex.NoCredentialsError:
        raise AwsError(
            f"{what}: no AWS credentials found",
            hint="set AWS_PROFILE, run `aws configure` or `aws sso login`, or use an instance role",
        ) from None
    except bex.NoRegionError:
        raise AwsError(f"{what}: no AWS region is set", hint="pass --region or set AWS_REGION") from None
    except bex.ClientError as err:
        detail = err.response.get("Error", {})
        code = detail.get("Code", "error")
        message = " ".join(str(detail.get("Message", "")).split())[:300]
        raise AwsError(f"{what}: {code}: {message}".rstrip(": "), hint=_hint(code)) from None
    except (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ReadTimeoutError) as err:
        endpoint = os.environ.get("AWS_ENDPOINT_URL")
        where = f" (AWS_ENDPOINT_URL={endpoint})" if endpoint else ""
        raise AwsError(f"{what}: cannot reach AWS{where}: {err}") from None
    except bex.BotoCoreError as err:
        raise AwsError(f"{what}: {err}") from None


def _hint(code: str) -> str | None:
    if code in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation"):
        return "your AWS identity lacks this permission; check `aws sts get-caller-identity`"
    if code in ("ExpiredTokenException", "ExpiredToken", "UnrecognizedClientException", "InvalidClientTokenId"):
        return "your AWS credentials are expired or invalid; refresh them (`aws sso login`)"
    return None
