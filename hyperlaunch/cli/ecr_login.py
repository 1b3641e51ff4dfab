"""`hyperlaunch ecr-login`: let enroot on the compute nodes pull images from Amazon ECR
(the logic is hyperlaunch.aws.ecr)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._output import out

if TYPE_CHECKING:
    from datetime import datetime

    from hyperlaunch.aws.ecr import Login

_REGION_HELP = "AWS region of the registry [default: the one in --registry, else AWS_REGION / your AWS configuration]."
_REGISTRY_HELP = (
    "ECR registry to log in to, ACCOUNT.dkr.ecr.REGION.amazonaws.com (the part of an image URI before the first '/') "
    "[default: your account's registry in the region]."
)
_LITERAL_HELP = (
    "Write the token itself instead of the command that fetches one. For nodes without the AWS CLI: the token "
    "expires after 12 hours, and a node that imports the image after that (a requeue, a replaced node) cannot pull."
)
_FILE_HELP = (
    "File to write [default: $ENROOT_CONFIG_PATH/.credentials, else enroot.conf's, else "
    "$XDG_CONFIG_HOME/enroot/.credentials or ~/.config/enroot/.credentials]. The nodes' enroot must read the same "
    "file: put it on shared storage."
)


def ecr_login(
    region: Annotated[str | None, typer.Option("--region", metavar="REGION", help=_REGION_HELP)] = None,
    registry: Annotated[str | None, typer.Option("--registry", metavar="REGISTRY", help=_REGISTRY_HELP)] = None,
    literal_token: Annotated[bool, typer.Option("--literal-token", help=_LITERAL_HELP)] = False,
    credentials_file: Annotated[Path | None, typer.Option("--credentials-file", metavar="PATH", help=_FILE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of text.")] = False,
) -> None:
    """Write enroot's credentials for an ECR registry, so Pyxis can pull --container-image from it.

    Asks ECR for an authorization token (your AWS credentials need ecr:GetAuthorizationToken)
    and writes the registry's line into enroot's credentials file (0600), replacing only an
    older line for the same registry. By default the line holds the command
    `$(aws ecr get-login-password --region R)`, which enroot runs at every import, so a job
    that outlives a token's 12 hours still pulls on new nodes; the nodes then need the AWS CLI
    and an identity allowed to pull (the cluster's instance role).

    Examples:

    \b
      hyperlaunch ecr-login --region us-west-2
      hyperlaunch ecr-login --registry 123456789012.dkr.ecr.us-west-2.amazonaws.com --credentials-file /fsx/enroot/.credentials
      hyperlaunch submit --container-image 123456789012.dkr.ecr.us-west-2.amazonaws.com/train:v1 ...
    """
    from hyperlaunch.aws import ecr

    done = ecr.login(region=region, registry=registry, literal_token=literal_token, credentials_file=credentials_file)
    _warn_about(done)
    if as_json:
        out.json(_document(done))
        return
    verb = "replaced the line for" if done.replaced else "added a line for"
    out.text(f"wrote {done.path} (mode 0600): {verb} {done.registry}")
    if done.password_shown is not None:
        out.text(f"  password: {done.password_shown}  (enroot runs it at every import: no expiry)")
    else:
        expiry = f"until {_utc(done.expires_at)}" if done.expires_at else "for 12 hours"
        out.text(f"  password: the token itself, valid {expiry}; run ecr-login again before jobs import after that")
    out.text(f"  use:      --container-image {done.registry}/REPO:TAG")


def _warn_about(done: Login) -> None:
    from hyperlaunch.aws import ecr

    if done.path.name != ecr.CREDENTIALS_NAME:
        out.warn(f"enroot reads only {ecr.CREDENTIALS_NAME} in $ENROOT_CONFIG_PATH; {done.path.name} will not be read unless renamed")
    if done.storage.shared is False:
        out.warn(
            f"{done.path} is on {done.storage.fstype} (mounted at {done.storage.mount_point}), which is usually local to "
            "this machine: enroot on the compute nodes reads their own copy, and pulls fail there (401) unless they share "
            "this file. Write it to shared storage (--credentials-file /fsx/.../.credentials) and point the nodes' "
            "ENROOT_CONFIG_PATH at its folder. This is a guess from the file system type: ignore it if the nodes see this path."
        )
    if done.form == "command" and not ecr.aws_cli_here():
        out.warn(
            "the AWS CLI is not on PATH here; enroot runs `aws ecr get-login-password` on the nodes at every import, "
            "so if they lack it too, use --literal-token"
        )


def _document(done: Login) -> dict[str, object]:
    return {
        "credentials_file": str(done.path),
        "registry": done.registry,
        "account": done.account,
        "region": done.region,
        "form": done.form,
        "password": done.password_shown,
        "expires_at": done.expires_at.isoformat() if done.expires_at else None,
        "replaced": done.replaced,
        "storage": {"fstype": done.storage.fstype, "mount_point": done.storage.mount_point, "shared": done.storage.shared},
    }


def _utc(moment: datetime) -> str:
    from datetime import timezone

    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
