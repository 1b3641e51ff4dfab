"""Folders to S3 against a local moto server: `hyperlaunch checkpoints --copy-to` copies a
checkpoint (a large file in SHA-256-checked parts, small ones whole), an interrupted copy resumes
without sending the parts S3 has, and the object listing and checksums match the files."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

from hyperlaunch.aws import s3_copy
from tests.support.cli_runner import one_error_line, run_cli
from tests.support.moto_aws import LocalAws


@pytest.fixture
def checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(s3_copy, "PART_BYTES", 5 * 1024 * 1024)  # S3's smallest part: a 12 MB file has 3
    root = tmp_path / "ckpt"
    step = root / "m-20steps"
    step.mkdir(parents=True)
    (step / "__0_0.distcp").write_bytes(os.urandom(12 * 1024 * 1024))
    (step / ".metadata").write_bytes(b"metadata")
    (step / "hyperlaunch.json").write_text('{"model": "m", "step": 20}')
    (root / "m-latest").write_text("m-20steps\n")
    return root


def _listing(aws: LocalAws, bucket: str) -> dict[str, int]:
    return {o["Key"]: o["Size"] for o in aws.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])}


def test_a_checkpoint_copied_to_s3_holds_every_file_with_its_checksum(aws: LocalAws, checkpoints: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    aws.client("s3").create_bucket(Bucket="runs", CreateBucketConfiguration={"LocationConstraint": aws.region})
    result = run_cli(["checkpoints", "--checkpoint-dir", str(checkpoints), "--copy-to", "s3://runs/team/a", "--json"], monkeypatch)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["place"] == "s3://runs/team/a/m-20steps" and doc["files"] == 3 and doc["parts_skipped"] == 0
    files = {p.name: p for p in (checkpoints / "m-20steps").iterdir()}
    assert _listing(aws, "runs") == {f"team/a/m-20steps/{name}": p.stat().st_size for name, p in files.items()}
    head = aws.client("s3").head_object(Bucket="runs", Key="team/a/m-20steps/hyperlaunch.json", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(files["hyperlaunch.json"].read_bytes()).digest()).decode()
    body = aws.client("s3").get_object(Bucket="runs", Key="team/a/m-20steps/__0_0.distcp")["Body"].read()
    assert body == files["__0_0.distcp"].read_bytes()


def test_an_interrupted_copy_resumes_without_sending_the_parts_s3_has(aws: LocalAws, checkpoints: Path) -> None:
    aws.client("s3").create_bucket(Bucket="runs", CreateBucketConfiguration={"LocationConstraint": aws.region})
    sent = []

    def cut(done: int, total: int) -> None:
        sent.append(done)
        if done >= 10 * 1024 * 1024:  # two of the large file's three parts are in S3
            raise KeyboardInterrupt

    folder, place = checkpoints / "m-20steps", s3_copy.parse("s3://runs/again")
    with pytest.raises(KeyboardInterrupt):
        s3_copy.copy_folder(folder, place, progress=cut)
    assert not {"again/__0_0.distcp", "again/.metadata"} & set(_listing(aws, "runs"))  # nothing looks complete
    copied = s3_copy.copy_folder(folder, place)
    assert copied.parts_skipped == 2 and copied.files == 3
    assert "again/.metadata" in _listing(aws, "runs")
    body = aws.client("s3").get_object(Bucket="runs", Key="again/__0_0.distcp")["Body"].read()
    assert body == (folder / "__0_0.distcp").read_bytes()


def test_bad_places_are_one_line(aws: LocalAws, checkpoints: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one_error_line(run_cli(["checkpoints", "--checkpoint-dir", str(checkpoints), "--copy-to", "runs/x"], monkeypatch), 2, "not an S3 URI")
    one_error_line(run_cli(["checkpoints", "--checkpoint-dir", str(checkpoints), "--copy-to", "s3://Bad_Bucket"], monkeypatch), 2, "not an S3 bucket name")
    one_error_line(run_cli(["checkpoints", "--checkpoint-dir", str(checkpoints), "--copy-to", "s3://nobucket/x"], monkeypatch), 10, "NoSuchBucket")
