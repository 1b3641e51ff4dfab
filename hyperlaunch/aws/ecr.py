"""Registry credentials for enroot, so Pyxis can pull `--container-image` from Amazon ECR on
the compute nodes (`hyperlaunch ecr-login`).

enroot reads `$ENROOT_CONFIG_PATH/.credentials`, netrc lines such as
`machine ACCOUNT.dkr.ecr.REGION.amazonaws.com login AWS password PASSWORD`, at every import,
and runs a `$(command)` it finds there. An ECR token lasts 12 hours, and a long job imports
the image again on every node it gets later (a requeue, a replaced node), so the line written
by default is the command (`$(aws ecr get-login-password --region R)`), the literal token only
on request. Only this registry's line changes; every other line stays as it was."""

from __future__ import annotations

import base64
import binascii
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from hyperlaunch.aws import client as aws
from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.errors import AwsError, InvalidInput
from hyperlaunch.core.mounts import is_shared, mount_of

CREDENTIALS_NAME = ".credentials"
ENROOT_CONF = Path("/etc/enroot/enroot.conf")
"""enroot's system configuration (its default sysconfdir), which may set ENROOT_CONFIG_PATH."""
MOUNTS = Path("/proc/mounts")
REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]{1,2}")
"""An AWS region name (us-west-2, us-gov-west-1): checked before it is written into a command
enroot runs in a shell."""
REGISTRY = re.compile(r"(?P<account>[0-9]{12})\.dkr\.ecr(-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?")
Form = Literal["command", "literal"]


@dataclass(frozen=True)
class Storage:
    """What a file is stored on, as far as the mount table tells."""

    fstype: str | None
    mount_point: str | None

    @property
    def shared(self) -> bool | None:
        """Whether other machines are likely to see it; None when the mount table says nothing."""
        if self.fstype is None:
            return None
        return is_shared(self.fstype)


@dataclass(frozen=True)
class Login:
    """What `login` wrote."""

    path: Path
    registry: str
    region: str
    account: str
    form: Form
    password_shown: str | None
    """The password as written when it is a command; None for a literal token (a secret)."""
    expires_at: datetime | None
    """When a literal token stops working; None for the command form."""
    replaced: bool
    """Whether a line for this registry was there before."""
    storage: Storage


def login(
    *,
    region: str | None = None,
    registry: str | None = None,
    literal_token: bool = False,
    credentials_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Login:
    """Ask ECR for a token and write the registry's line into enroot's credentials file.
    Input is checked before AWS is asked, and nothing is written unless all of it succeeds."""
    environ = os.environ if environ is None else environ
    host = _registry_host(registry) if registry is not None else None
    if region is not None:
        _check_region(region, "--region")
    if host is not None:
        from_host = _registry_region(host)
        if region is not None and region != from_host:
            raise InvalidInput(f"--region {region} does not match --registry {host} (region {from_host})")
        region = from_host
    path = _target_file(credentials_file if credentials_file is not None else credentials_path(environ))
    existing = _read_existing(path)

    ecr = aws.client("ecr", region=region)
    region = str(ecr.meta.region_name)
    _check_region(region, "the AWS configuration's region")
    answer = aws.call("ECR get-authorization-token", ecr.get_authorization_token)
    data = (answer.get("authorizationData") or [{}])[0]
    host = host or _endpoint_host(str(data.get("proxyEndpoint", "")))
    password = _password(str(data.get("authorizationToken", "")))
    if literal_token:
        secret, shown, expires = password, None, data.get("expiresAt")
    else:
        secret = shown = f"$(aws ecr get-login-password --region {region})"
        expires = None
    line = f"machine {host} login AWS password {secret}\n".encode()
    text, replaced = merged_credentials(existing, host, line)
    _write_atomically(path, text)
    return Login(
        path=path, registry=host, region=region, account=_registry_account(host), form="literal" if literal_token else "command",
        password_shown=shown, expires_at=expires if isinstance(expires, datetime) else None, replaced=replaced,
        storage=storage_of(path),
    )


def credentials_path(environ: Mapping[str, str], *, enroot_conf: Path | None = None) -> Path:
    """The file enroot reads: `$ENROOT_CONFIG_PATH/.credentials`, where ENROOT_CONFIG_PATH is the
    environment's, else enroot.conf's, else enroot's default `$XDG_CONFIG_HOME/enroot` with
    XDG_CONFIG_HOME defaulting to `~/.config` (enroot's own order)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    folder = environ.get("ENROOT_CONFIG_PATH") or _conf_config_path(enroot_conf or ENROOT_CONF, environ)
    if not folder:
        folder = os.path.join(environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "enroot")
    return Path(os.path.expanduser(folder)) / CREDENTIALS_NAME


def _conf_config_path(conf: Path, environ: Mapping[str, str]) -> str | None:
    """ENROOT_CONFIG_PATH as enroot.conf sets it (the first line wins, as in enroot), with
    `$VAR` and `${VAR}` expanded; None when unset, unreadable, or computed by a command."""
    try:
        lines = conf.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        key, *rest = re.split(r"[\s=]+", line.strip(), maxsplit=1)
        if key != "ENROOT_CONFIG_PATH":
            continue
        value = (rest[0] if rest else "").strip().strip("\"'")
        if not value or "$(" in value or "`" in value:
            return None
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: environ.get(m.group(1) or m.group(2), ""), value) or None
    return None


def merged_credentials(existing: bytes, host: str, line: bytes) -> tuple[bytes, bool]:
    """`existing` with the line for `host` replaced by `line` (extra lines for it dropped), or
    `line` added at the end; every other line kept byte for byte."""
    kept: list[bytes] = []
    replaced = False
    for old in existing.splitlines(keepends=True):
        if _names_machine(old, host):
            if not replaced:
                kept.append(line)
            replaced = True
            continue
        kept.append(old)
    if not replaced:
        if kept and not kept[-1].endswith((b"\n", b"\r")):
            kept[-1] += b"\n"
        kept.append(line)
    return b"".join(kept), replaced


def _names_machine(line: bytes, host: str) -> bool:
    words = line.split()
    return len(words) >= 2 and words[0] == b"machine" and words[1].lower() == host.lower().encode()


def storage_of(path: Path, *, mounts: Path | None = None) -> Storage:
    """The file system holding `path` (or its nearest existing folder): the longest mount point
    of the mount table above its real path."""
    try:
        table = (mounts or MOUNTS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Storage(None, None)
    found = mount_of(os.path.realpath(path), table)
    return Storage(found[1], found[0]) if found else Storage(None, None)


def aws_cli_here() -> bool:
    return shutil.which("aws") is not None


def _check_region(region: str, what: str) -> None:
    if not REGION.fullmatch(region):
        raise InvalidInput(f"{what} {region!r:.80} is not an AWS region (like us-west-2)")


def _registry_host(registry: str) -> str:
    host = registry.strip()
    if host.startswith("https://"):
        host = host[len("https://") :]
    host = host.rstrip("/")
    if not REGISTRY.fullmatch(host):
        raise InvalidInput(
            f"--registry {registry!r:.100} is not an ECR registry: use ACCOUNT.dkr.ecr.REGION.amazonaws.com "
            "(the part of an image URI before the first '/')"
        )
    return host


def _registry_region(host: str) -> str:
    match = REGISTRY.fullmatch(host)
    assert match is not None
    region = match.group("region")
    _check_region(region, f"--registry {host}: region")
    return region


def _registry_account(host: str) -> str:
    match = REGISTRY.fullmatch(host)
    return match.group("account") if match else ""


def _endpoint_host(endpoint: str) -> str:
    host = urlparse(endpoint).hostname or ""
    if not REGISTRY.fullmatch(host):
        raise AwsError(f"ECR get-authorization-token: unexpected proxyEndpoint {endpoint!r:.100}")
    return host


def _password(token: str) -> str:
    """The password in ECR's token, which is base64 of `AWS:<password>`."""
    try:
        user, _, password = base64.b64decode(token, validate=True).decode("ascii").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        user, password = "", ""
    if user != "AWS" or not password or any(c.isspace() for c in password):
        raise AwsError("ECR get-authorization-token: the token is not base64 of AWS:<password>")
    return password


def _target_file(path: Path) -> Path:
    """Where to write: the file a symlink points at (the link stays), after checking that it is
    not a folder and that its folder is, or can be made, one we may write in."""
    path = Path(os.path.abspath(os.path.expanduser(path)))
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    what = f"--credentials-file {path}"
    try:
        if path.is_dir():
            raise InvalidInput(f"{what} is a folder; name the file (enroot reads <folder>/{CREDENTIALS_NAME})")
        if path.exists() and not path.is_file():
            raise InvalidInput(f"{what} is not a regular file")
        folder = next(p for p in path.parents if p.exists())
    except OSError as err:
        raise InvalidInput(f"{what}: {err.strerror or err}") from None
    if not folder.is_dir():
        raise InvalidInput(f"{what}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInput(f"{what}: cannot write in {folder} (permission denied)")
    return path


def _read_existing(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
    except OSError as err:
        raise InvalidInput(f"--credentials-file {path}: cannot read it: {err.strerror or err}") from None


def _write_atomically(path: Path, text: bytes) -> None:
    """`text` into `path`, 0600, through a file beside it renamed over it: a reader sees the old
    file or the new one, never half of one. Folders created on the way are 0700; existing ones
    are left as they are (a shared folder is not ours to close)."""
    try:
        _make_private_folders(path.parent)
    except OSError as err:
        raise InvalidInput(f"--credentials-file {path}: cannot write there: {err.strerror or err}") from None
    try:
        write_atomically(path, text, mode=0o600)
    except OSError as err:
        raise InvalidInput(f"--credentials-file {path}: cannot write it: {err.strerror or err}") from None


def _make_private_folders(folder: Path) -> None:
    missing = []
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    for candidate in reversed(missing):
        os.mkdir(candidate, 0o700)
        os.chmod(candidate, 0o700)  # whatever the umask
