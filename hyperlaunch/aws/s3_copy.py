"""A folder copied to S3 (`s3://bucket/prefix/...`): an exported model, or a DCP checkpoint.

Files up to one part are put whole; larger ones go up as multipart uploads of PART_BYTES parts.
Every part and object carries a SHA-256 checksum that S3 verifies on arrival, and the object's
checksum is compared with the local file's once it is complete. A multipart upload interrupted
(Ctrl-C, a lost connection) is resumed by the next copy of the same file to the same key: its
upload id is kept under ~/.hyperlaunch/uploads/, S3 lists the parts it has, and those whose
checksum matches the local part are not sent again. Credentials are the user's AWS
configuration (environment, profile, instance role); hyperlaunch writes none of them."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.aws.client import aws_errors, client
from hyperlaunch.core.atomic_file import TEMP_SUFFIX, write_atomically
from hyperlaunch.core.errors import AwsError, InvalidInput
from hyperlaunch.core.paths import hyperlaunch_home

PART_BYTES = 64 * 1024 * 1024
"""Multipart part size (S3: at least 5 MiB but the last, at most 10,000 parts: 640 GB a file)."""
UPLOADS_DIR = "uploads"
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class S3Place:
    bucket: str
    prefix: str

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse(uri: str) -> S3Place:
    """`s3://bucket/prefix` (the prefix may be empty); InvalidInput for anything else."""
    if not uri.startswith("s3://"):
        raise InvalidInput(f"{uri!r} is not an S3 URI; expected s3://BUCKET/PREFIX")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    valid = 3 <= len(bucket) <= 63 and all(c.islower() or c.isdigit() or c in ".-" for c in bucket)
    if not valid or bucket[0] in ".-" or bucket[-1] in ".-":
        raise InvalidInput(f"{uri!r}: {bucket!r} is not an S3 bucket name (3-63 of a-z, 0-9, '.', '-')")
    return S3Place(bucket, prefix.strip("/"))


@dataclass(frozen=True)
class Copied:
    place: str
    files: int
    bytes: int
    parts_skipped: int
    """Parts an earlier, interrupted copy had already sent."""


def copy_folder(folder: Path, place: S3Place, *, progress: Progress | None = None, region: str | None = None) -> Copied:
    """Every file under `folder` to `place`, relative paths kept, the completion markers last
    (a copy cut short never looks complete); resumes interrupted multipart uploads (module
    docstring). Hidden folders (an export being written) and atomic writes' temp files stay."""
    files = sorted((p for p in folder.rglob("*") if p.is_file() and _copied(p.relative_to(folder))), key=_order)
    total = sum(p.stat().st_size for p in files)
    s3 = client("s3", region=region or _configured_region() or "us-east-1")
    done, skipped = 0, 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    for path in files:
        key = place.key(path.relative_to(folder).as_posix())
        what = f"S3 copy of {path.name} to s3://{place.bucket}/{key}"
        with aws_errors(what):
            if path.stat().st_size <= PART_BYTES:
                _put(s3, path, place.bucket, key)
                advance(path.stat().st_size)
            else:
                skipped += _multipart(s3, path, place.bucket, key, advance)
            _verify(s3, path, place.bucket, key, what)
    return Copied(str(place), len(files), total, skipped)


LAST = (".metadata", "hyperlaunch-export.json")
"""Completion markers: DCP's, and an export's (hyperlaunch.core.hf_exports.EXPORT_MARKER)."""


def _copied(relative: Path) -> bool:
    hidden_folder = any(part.startswith(".") for part in relative.parts[:-1])
    return not hidden_folder and not relative.name.endswith(TEMP_SUFFIX)


def _order(path: Path) -> tuple[bool, str]:
    return (path.name in LAST, str(path))


def _configured_region() -> str | None:
    """The AWS configuration's region; S3 needs none (boto3 follows a bucket to its region)."""
    import boto3

    return boto3.session.Session().region_name


def _sha256_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def _put(s3: Any, path: Path, bucket: str, key: str) -> None:
    data = path.read_bytes()
    s3.put_object(Bucket=bucket, Key=key, Body=data, ChecksumAlgorithm="SHA256", ChecksumSHA256=_sha256_b64(data))


def _parts(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as file:
        number = 1
        while chunk := file.read(PART_BYTES):
            yield number, chunk
            number += 1


def _state_file(path: Path, bucket: str, key: str) -> Path:
    stat = path.stat()
    identity = json.dumps([str(path.resolve()), stat.st_size, stat.st_mtime_ns, bucket, key])
    return hyperlaunch_home() / UPLOADS_DIR / (hashlib.sha256(identity.encode()).hexdigest()[:32] + ".json")


def _multipart(s3: Any, path: Path, bucket: str, key: str, advance: Callable[[int], None]) -> int:
    """Upload `path` in parts, continuing the upload an interrupted copy left; the parts skipped."""
    state = _state_file(path, bucket, key)
    upload_id, sent = _resumable(s3, state, bucket, key)
    if upload_id is None:
        upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256")["UploadId"]
        state.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomically(state, json.dumps({"upload_id": upload_id, "bucket": bucket, "key": key}).encode())
    finished, skipped = [], 0
    for number, chunk in _parts(path):
        checksum = _sha256_b64(chunk)
        previous = sent.get(number)
        if previous is not None and _same_part(previous, chunk, checksum):
            etag = previous["ETag"]
            skipped += 1
        else:
            etag = s3.upload_part(
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk, ChecksumSHA256=checksum,
            )["ETag"]
        finished.append({"PartNumber": number, "ETag": etag, "ChecksumSHA256": checksum})
        advance(len(chunk))
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": finished})
    state.unlink(missing_ok=True)
    return skipped


def _same_part(listed: dict[str, Any], chunk: bytes, checksum: str) -> bool:
    """A part S3 already has is this chunk: by its SHA-256 where S3 lists one, else by its
    ETag, the MD5 of an unencrypted part's bytes."""
    if listed.get("ChecksumSHA256"):
        return bool(listed["ChecksumSHA256"] == checksum)
    return str(listed.get("ETag", "")).strip('"') == hashlib.md5(chunk, usedforsecurity=False).hexdigest()


def _resumable(s3: Any, state: Path, bucket: str, key: str) -> tuple[str | None, dict[int, dict[str, Any]]]:
    """The upload an earlier copy of this file left unfinished, and the parts S3 has of it."""
    try:
        recorded = json.loads(state.read_text())
        upload_id = str(recorded["upload_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, {}
    try:
        listed = s3.list_parts(Bucket=bucket, Key=key, UploadId=upload_id)
    except Exception:  # noqa: BLE001 - aborted or expired upload: start a new one
        state.unlink(missing_ok=True)
        return None, {}
    return upload_id, {int(part["PartNumber"]): part for part in listed.get("Parts", [])}


def _verify(s3: Any, path: Path, bucket: str, key: str, what: str) -> None:
    """The object S3 holds has the local file's size and SHA-256: of the whole file, or, for a
    multipart upload where S3 reports it so (`<digest>-<parts>`), of the parts' digests."""
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    size = path.stat().st_size
    if int(head["ContentLength"]) != size:
        raise AwsError(f"{what}: S3 holds {head['ContentLength']} bytes, the file has {size}")
    reported = head.get("ChecksumSHA256")
    if not reported:
        return  # S3 verified each part and object on arrival; this store reports no checksum
    whole, of_parts = hashlib.sha256(), hashlib.sha256()
    count = 0
    for _, chunk in _parts(path):
        whole.update(chunk)
        of_parts.update(hashlib.sha256(chunk).digest())
        count += 1
    composite = base64.b64encode(of_parts.digest()).decode()
    # S3 names a multipart object's composite checksum `<digest>-<parts>`; some S3-compatible
    # stores (moto among them) leave the suffix out.
    accepted = {base64.b64encode(whole.digest()).decode(), f"{composite}-{count}"} | ({composite} if count > 1 else set())
    if reported not in accepted:
        raise AwsError(f"{what}: S3's SHA-256 ({reported}) differs from the file's")
