"""`hyperlaunch ecr-login` against a local moto server: the registry's line in enroot's
credentials file (the command form by default, moto's token with --literal-token), 0600,
only that registry's line replaced, and bad input refused in one line before anything is
written."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hyperlaunch.aws import ecr
from tests.support.cli_runner import CliResult, run_cli
from tests.support.moto_aws import ACCOUNT, REGION, LocalAws

REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
COMMAND_LINE = f"machine {REGISTRY} login AWS password $(aws ecr get-login-password --region {REGION})\n"
MOTO_TOKEN = f"{ACCOUNT}-auth-token"  # moto's password: base64("AWS:<account>-auth-token")


@pytest.fixture(autouse=True)
def _mounts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A mount table in which tmp_path is on Lustre, so no test depends on this machine's."""
    table = tmp_path / "mounts"
    table.write_text(f"rootfs / ext4 rw 0 0\nfsx@tcp:/x {tmp_path} lustre rw 0 0\n")
    monkeypatch.setattr(ecr, "MOUNTS", table)
    monkeypatch.setattr(ecr, "ENROOT_CONF", tmp_path / "no-enroot.conf")
    return table


def login(monkeypatch: pytest.MonkeyPatch, *args: str) -> CliResult:
    return run_cli(["ecr-login", *args], monkeypatch)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_default_line_runs_the_aws_cli_at_every_import(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "new" / "enroot" / ".credentials"
    result = login(monkeypatch, "--credentials-file", str(target))
    assert result.exit_code == 0, result.stderr
    assert target.read_text() == COMMAND_LINE
    assert mode(target) == 0o600 and mode(target.parent) == 0o700 and mode(target.parent.parent) == 0o700
    assert str(target) in result.stdout and REGISTRY in result.stdout and "get-login-password" in result.stdout
    assert sorted(p.name for p in target.parent.iterdir()) == [".credentials"]  # no temporary file left


def test_literal_token_writes_ecrs_token_and_says_when_it_expires(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / ".credentials"
    result = login(monkeypatch, "--literal-token", "--credentials-file", str(target))
    assert result.exit_code == 0, result.stderr
    assert target.read_text() == f"machine {REGISTRY} login AWS password {MOTO_TOKEN}\n"
    assert mode(target) == 0o600
    assert "valid until 2015-01-01 00:00 UTC" in result.stdout  # moto's expiresAt
    assert MOTO_TOKEN not in result.output  # a secret: written, never printed


def test_only_the_registrys_line_is_replaced(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / ".credentials"
    other_ecr = f"machine 999999999999.dkr.ecr.{REGION}.amazonaws.com login AWS password $(aws ecr get-login-password --region {REGION})\n"
    before = [
        b"# NVIDIA GPU Cloud\n",
        b"machine nvcr.io login $oauthtoken password nvapi-\xff-not-utf8 \r\n",
        f"machine {REGISTRY.upper()} login AWS password old-token\n".encode(),
        other_ecr.encode(),
        b"\n",
        f"machine {REGISTRY} login AWS password duplicate\n".encode(),
        b"machine ghcr.io login me password tok",  # no newline at the end
    ]
    target.write_bytes(b"".join(before))
    target.chmod(0o644)
    result = login(monkeypatch, "--credentials-file", str(target))
    assert result.exit_code == 0, result.stderr
    assert "replaced the line" in result.stdout
    assert target.read_bytes() == b"".join([before[0], before[1], COMMAND_LINE.encode(), before[3], before[4], before[6]])
    assert mode(target) == 0o600

    again = login(monkeypatch, "--credentials-file", str(target))  # idempotent
    assert again.exit_code == 0 and target.read_bytes().count(b"get-login-password --region") == 2


def test_a_new_registry_is_added_at_the_end(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / ".credentials"
    target.write_bytes(b"machine ghcr.io login me password tok")
    result = login(monkeypatch, "--credentials-file", str(target))
    assert result.exit_code == 0, result.stderr
    assert target.read_bytes() == b"machine ghcr.io login me password tok\n" + COMMAND_LINE.encode()
    assert "added a line" in result.stdout


def test_a_symlinked_file_is_updated_and_the_link_kept(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "shared" / "creds"
    real.parent.mkdir()
    real.write_text("machine ghcr.io login me password tok\n")
    link = tmp_path / ".credentials"
    link.symlink_to(real)
    assert login(monkeypatch, "--credentials-file", str(link)).exit_code == 0
    assert link.is_symlink() and real.read_text() == "machine ghcr.io login me password tok\n" + COMMAND_LINE


def test_json_is_one_document(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / ".credentials"
    result = login(monkeypatch, "--json", "--credentials-file", str(target))
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document == {
        "credentials_file": str(target),
        "registry": REGISTRY,
        "account": ACCOUNT,
        "region": REGION,
        "form": "command",
        "password": f"$(aws ecr get-login-password --region {REGION})",
        "expires_at": None,
        "replaced": False,
        "storage": {"fstype": "lustre", "mount_point": str(tmp_path), "shared": True},
    }
    literal = json.loads(login(monkeypatch, "--json", "--literal-token", "--credentials-file", str(target)).stdout)
    assert literal["form"] == "literal" and literal["password"] is None and literal["expires_at"].startswith("2015-01-01")


def test_the_default_file_is_enroots(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENROOT_CONFIG_PATH", str(tmp_path / "enroot-config"))
    result = login(monkeypatch)
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "enroot-config" / ".credentials").read_text() == COMMAND_LINE


def test_enroots_search_order(tmp_path: Path) -> None:
    home = {"HOME": "/home/u"}
    assert ecr.credentials_path(home) == Path("/home/u/.config/enroot/.credentials")
    assert ecr.credentials_path({**home, "XDG_CONFIG_HOME": "/x"}) == Path("/x/enroot/.credentials")
    conf = tmp_path / "enroot.conf"
    conf.write_text("# system settings\nENROOT_DATA_PATH /nvme/data\nENROOT_CONFIG_PATH   ${HOME}/enroot-cfg\nENROOT_CONFIG_PATH /ignored\n")
    assert ecr.credentials_path({**home, "XDG_CONFIG_HOME": "/x"}, enroot_conf=conf) == Path("/home/u/enroot-cfg/.credentials")
    assert ecr.credentials_path({**home, "ENROOT_CONFIG_PATH": "/fsx/e"}, enroot_conf=conf) == Path("/fsx/e/.credentials")
    conf.write_text("ENROOT_CONFIG_PATH /cfg/$(id -u)\n")  # enroot would run it; we cannot know: its default
    assert ecr.credentials_path(home, enroot_conf=conf) == Path("/home/u/.config/enroot/.credentials")


def test_the_region_and_registry_come_from_the_registry(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    target = tmp_path / ".credentials"
    other = f"210987654321.dkr.ecr.{REGION}.amazonaws.com"  # another account's registry, same region
    result = login(monkeypatch, "--registry", f"https://{other}/", "--credentials-file", str(target))
    assert result.exit_code == 0, result.stderr
    assert target.read_text() == f"machine {other} login AWS password $(aws ecr get-login-password --region {REGION})\n"


def test_local_storage_is_warned_about(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _mounts: Path) -> None:
    _mounts.write_text(f"/dev/nvme0n1p1 / ext4 rw 0 0\n/dev/x {tmp_path} xfs rw 0 0\n")
    result = login(monkeypatch, "--credentials-file", str(tmp_path / ".credentials"))
    assert result.exit_code == 0
    assert "warning:" in result.stderr and "xfs" in result.stderr and "shared storage" in result.stderr


def test_storage_is_read_from_the_mount_table(tmp_path: Path) -> None:
    table = tmp_path / "table"
    table.write_text("/dev/root / ext4 rw 0 0\nfs@tcp:/a /fsx lustre rw 0 0\nsrv:/home /home nfs4 rw 0 0\nx /mnt/my\\040data fuse.s3fs rw 0 0\n")
    assert ecr.storage_of(Path("/fsx/enroot/.credentials"), mounts=table) == ecr.Storage("lustre", "/fsx")
    assert ecr.storage_of(Path("/fsxx/.credentials"), mounts=table).shared is False
    assert ecr.storage_of(Path("/home/u/.config/enroot/.credentials"), mounts=table).shared is True
    assert ecr.storage_of(Path("/mnt/my data/c"), mounts=table) == ecr.Storage("fuse.s3fs", "/mnt/my data")
    assert ecr.storage_of(Path("/x"), mounts=tmp_path / "absent").shared is None


def test_another_file_name_is_warned_about(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = login(monkeypatch, "--credentials-file", str(tmp_path / "creds.txt"))
    assert result.exit_code == 0 and "enroot reads only .credentials" in result.stderr


def _one_line_error(result: CliResult, code: int, text: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("hyperlaunch: error: ") and text in result.stderr


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--region", "us_west_2"], "is not an AWS region"),
        (["--region", "us-west-2; touch /tmp/x"], "is not an AWS region"),
        (["--registry", "ghcr.io"], "is not an ECR registry"),
        (["--registry", f"{REGISTRY}/repo:tag"], "is not an ECR registry"),
        (["--registry", REGISTRY, "--region", "eu-west-1"], "does not match --registry"),
    ],
)
def test_bad_input_is_one_line(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], text: str) -> None:
    target = tmp_path / ".credentials"
    _one_line_error(login(monkeypatch, *args, "--credentials-file", str(target)), 2, text)
    assert not target.exists()


def test_a_folder_or_a_file_in_the_way_is_one_line(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _one_line_error(login(monkeypatch, "--credentials-file", str(tmp_path)), 2, "is a folder")
    blocker = tmp_path / "file"
    blocker.write_text("mine\n")
    _one_line_error(login(monkeypatch, "--credentials-file", str(blocker / ".credentials")), 2, "is a file, not a folder")
    assert blocker.read_text() == "mine\n"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where nobody (root included) makes folders")
def test_an_unwritable_place_is_one_line(aws: LocalAws, monkeypatch: pytest.MonkeyPatch) -> None:
    _one_line_error(login(monkeypatch, "--credentials-file", "/proc/hyperlaunch-test/.credentials"), 2, "cannot write there")


def test_an_aws_failure_leaves_the_file_as_it_was(aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "enroot" / ".credentials"
    target.parent.mkdir()
    target.write_text("machine ghcr.io login me password tok\n")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    _one_line_error(login(monkeypatch, "--credentials-file", str(target)), 10, "cannot reach AWS")
    assert target.read_text() == "machine ghcr.io login me password tok\n"
    assert os.listdir(target.parent) == [".credentials"]
    fresh = tmp_path / "not-yet" / ".credentials"
    _one_line_error(login(monkeypatch, "--credentials-file", str(fresh)), 10, "cannot reach AWS")
    assert not fresh.parent.exists()  # no folder made for a file never written


def test_the_help_teaches(monkeypatch: pytest.MonkeyPatch) -> None:
    result = login(monkeypatch, "--help")
    assert result.exit_code == 0
    words = " ".join(result.stdout.split())  # the help is wrapped to the terminal
    for text in ("--literal-token", "12 hours", "get-login-password", "--credentials-file", "--registry", "Examples"):
        assert text in words


def test_merging_keeps_every_other_byte() -> None:
    line = b"machine r login AWS password p\n"
    assert ecr.merged_credentials(b"", "r", line) == (line, False)
    assert ecr.merged_credentials(b"a\r\nmachine r login AWS password old\r\nb", "r", line) == (b"a\r\n" + line + b"b", True)
    assert ecr.merged_credentials(b"#machine r\nmachine rr x\n", "r", line) == (b"#machine r\nmachine rr x\n" + line, False)
