"""A full filesystem under the checkpoints or an export, for real: the trainer (torchrun, 2 gloo
ranks) and the exporter run with their output folder on a small tmpfs, mounted in a mount
namespace of their own (`unshare -rm`: no change to this machine's mounts).

What a user gets: the job ends at once with `disk-full` (final: every attempt would fail the
same way), one line that names the folder and the figures, the last complete checkpoint and
`-latest` untouched, and nothing half-written left to fill the disk further."""

from __future__ import annotations

import errno
import json
import shlex
import subprocess
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints as ck
from hyperlaunch.core.disk_space import format_size
from hyperlaunch.core.trainer_failures import TRAINER_FAILURE_FILE_ENV, TrainerFailure, read_trainer_failure
from tests.support.train_helpers import PYTHON, Run, launch, tiny_args, train_env, tree_digest

MODEL = "qwen3_tiny"
CHECKPOINT_MIB = 1.7
"""One checkpoint of qwen3_tiny on 2 ranks, about: weights, AdamW's moments, RNG and schedule
(the figures asserted are each run's own, `sizes` in the listing)."""
FINAL_EXPORT_DISK_MIB = 2.8
"""Room for that checkpoint and not for the fp32 Hugging Face model exported beside it."""


def on_small_disk(folder: Path, mib: float, inodes: int | None = None) -> list[str]:
    """A command prefix: run the command with a `mib` MiB tmpfs (of `inodes` files and folders
    at most) mounted at `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = 'mount -t tmpfs -o "$1" hyperlaunch-test "$2" && shift 2 && exec "$@"'
    options = f"size={int(mib * 1024)}k" + (f",nr_inodes={inodes}" if inodes else "")
    return ["unshare", "-rm", "sh", "-c", script, "sh", options, str(folder)]


_LISTER = (
    "import json, sys; from pathlib import Path; from hyperlaunch.core import checkpoints as ck; "
    "d = Path(sys.argv[1]); names = sorted(p.name for p in d.iterdir()); "
    "doc = {'entries': names, 'pointer': ck.read_pointer(d, sys.argv[3]), "
    "'complete': [n for n in names if (d / n / ck.METADATA_FILE).is_file()], "
    "'sizes': {n: ck.dir_size(d / n) for n in names if (d / n / ck.METADATA_FILE).is_file()}}; "
    "Path(sys.argv[2]).write_text(json.dumps(doc))"
)


def listed_after(folder: Path, into: Path) -> list[str]:
    """A command prefix: run the command, then write what `folder` holds into `into` (JSON),
    before the small filesystem goes away with its namespace."""
    lister = shlex.join([PYTHON, "-c", _LISTER, str(folder), str(into), MODEL])
    return ["sh", "-c", f'"$@"; code=$?; {lister}; exit $code', "sh"]


def _trained(
    tmp_path: Path, mib: float, *extra: str, env: dict[str, str] | None = None, inodes: int | None = None
) -> tuple[Run, TrainerFailure | None, dict]:
    """Six steps, a checkpoint every 2, on a `mib` MiB filesystem: the run, its failure record
    and what the checkpoint folder held at the end."""
    ckpt, record, listing = tmp_path / "ck", tmp_path / "trainer-failure", tmp_path / "listing.json"
    run = launch(
        tiny_args(ckpt, "--checkpoint-every", "2", "--no-export", *extra, steps=6), run_dir=tmp_path / "run",
        env={TRAINER_FAILURE_FILE_ENV: str(record), **(env or {})}, check=False,
        wrap=[*on_small_disk(ckpt, mib, inodes), *listed_after(ckpt, listing)],
    )
    return run, read_trainer_failure(record), json.loads(listing.read_text())


def test_no_room_for_the_next_checkpoint_ends_the_run_before_it_writes(tmp_path: Path) -> None:
    """Room for one checkpoint: the first is saved; the second is refused before a byte of it
    is written, on every rank, with the free space and the size it needs."""
    run, failure, left = _trained(tmp_path, 1.8 * CHECKPOINT_MIB)
    assert run.returncode != 0
    assert failure is not None and failure.final and failure.kind == "disk-full", run.stderr[-3000:]
    first = format_size(left.pop("sizes")[f"{MODEL}-2steps"])
    assert failure.message.startswith(f"no room for checkpoint {MODEL}-4steps: it needs about {first} in {tmp_path / 'ck'}, which has "), failure.message
    assert failure.message.endswith(
        " free (free space there, then 'hyperlaunch resume JOB'; every checkpoint is kept: 'hyperlaunch checkpoints"
        f" --checkpoint-dir {tmp_path / 'ck'} --model {MODEL} --prune N --yes' removes all but the newest N, and -- --keep-last N"
        " keeps fewer)"
    ), "JOB: this run is no Slurm job; the prune names folder and model, which a sweep element's id would not"
    errors = [line for line in run.stderr.splitlines() if line.startswith("hyperlaunch.train: error:")]
    assert errors == [f"hyperlaunch.train: error: {failure.message}"], "one line, from rank 0"
    assert "Traceback" not in run.stderr.split("failed (exitcode")[0], "torchrun's own follows; none of the trainer's"
    assert left == {"entries": [".hyperlaunch-data", f"{MODEL}-2steps", f"{MODEL}-latest"],
                    "pointer": f"{MODEL}-2steps", "complete": [f"{MODEL}-2steps"]}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_disk_filled_by_another_writer_during_a_save_leaves_the_last_checkpoint(tmp_path: Path, mode: str) -> None:
    """The disk fills while checkpoint 4's shards are written (another writer): its completion
    marker cannot be written, DCP fails on every rank, and the trainer names the disk, removes
    the unfinished checkpoint and ends; `-latest` still names step 2, whole. An async save
    fails the same way, when the loop next looks at it."""
    ckpt = tmp_path / "ck"
    env = {"HYPERLAUNCH_TEST_FILL_DISK_DURING_SAVE": "4", "HYPERLAUNCH_TEST_FILL_FILE": str(ckpt / "filler")}
    run, failure, left = _trained(tmp_path, 16, *(["--async-checkpoint"] if mode == "async" else []), env=env)
    assert run.returncode != 0
    assert failure is not None and failure.final and failure.kind == "disk-full", run.stderr[-3000:]
    first = format_size(left.pop("sizes")[f"{MODEL}-2steps"])
    assert failure.message.startswith(
        f"saving checkpoint {MODEL}-4steps: no space left on device in {ckpt} (it needs about {first}) (free space there, then"
    ), failure.message
    assert "Traceback" not in run.stderr.split("failed (exitcode")[0], "torchrun's own follows; none of the trainer's"
    assert left == {"entries": [".hyperlaunch-data", "filler", f"{MODEL}-2steps", f"{MODEL}-latest"],
                    "pointer": f"{MODEL}-2steps", "complete": [f"{MODEL}-2steps"]}


@pytest.mark.parametrize("inodes", [9, 13, 15])
def test_no_files_left_though_bytes_are_free_is_a_full_disk_too(tmp_path: Path, inodes: int) -> None:
    """A filesystem out of inodes (Lustre and FSx run out of them too): the byte count passes
    the check, then creating the folder, a shard or the pointer fails with ENOSPC on one rank
    or all. However many files fit, the run ends on every rank with disk-full, no rank waits
    in a collective, and `-latest` names a complete checkpoint or none."""
    run, failure, left = _trained(tmp_path, 16, inodes=inodes)
    assert run.returncode != 0
    assert failure is not None and failure.final and failure.kind == "disk-full", run.stderr[-3000:]
    assert "no space left on device" in failure.message, failure.message
    assert left["pointer"] is None or left["pointer"] in left["complete"], left


def test_a_save_that_fails_otherwise_is_a_crash_named_in_the_record(tmp_path: Path) -> None:
    """Not a full disk (permission denied): another attempt may succeed, so the record says
    retry, and it names the checkpoint, the rank and the error rather than nothing at all."""
    run, failure, left = _trained(tmp_path, 16, env={"HYPERLAUNCH_TEST_DENY_SAVE": "4"})
    assert run.returncode != 0
    assert failure is not None and not failure.final and failure.kind == "unexpected", run.stderr[-3000:]
    assert failure.message.startswith(
        f"RuntimeError: saving checkpoint {MODEL}-4steps failed on rank 0: PermissionError: [Errno 13] Permission denied"
    ), failure.message
    assert left["pointer"] == f"{MODEL}-2steps" and left["complete"] == [f"{MODEL}-2steps"]


def test_a_final_export_that_does_not_fit_leaves_the_training_completed(tmp_path: Path) -> None:
    """Room for the last checkpoint, not for the Hugging Face model the trainer exports after
    it: the run still ends 0 (before, a final disk-full failure of a finished training), says
    so in one warning with what to run, records it for `status`, and leaves no export folder."""
    ckpt, listing, run_dir = tmp_path / "ck", tmp_path / "listing.json", tmp_path / "run"
    run = launch(
        tiny_args(ckpt, "--checkpoint-every", "2", steps=2), run_dir=run_dir, check=False,
        wrap=[*on_small_disk(ckpt, FINAL_EXPORT_DISK_MIB), *listed_after(ckpt, listing)],
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (warning,) = [line for line in run.stderr.splitlines() if "export was not written" in line]
    assert f"the training is complete and saved ({MODEL}-2steps)" in warning and f"no room for the export of {MODEL}-2steps" in warning
    assert "hyperlaunch export" in warning and "--output DIR" in warning
    left = json.loads(listing.read_text())
    assert left["pointer"] == f"{MODEL}-2steps" and left["complete"] == [f"{MODEL}-2steps"], left
    assert not [name for name in left["entries"] if "final" in name], left
    from hyperlaunch.core.metrics_records import EventRecord, parse_metrics_line

    events = [r for r in map(parse_metrics_line, (run_dir / "metrics.jsonl").read_text().splitlines()) if isinstance(r, EventRecord)]
    assert [e.event for e in events if "export" in e.event] == ["export_failed"]


def test_an_export_that_does_not_fit_is_refused_before_it_writes(tmp_path: Path) -> None:
    """`python -m hyperlaunch.train.hf_export` (what `hyperlaunch export` runs) into a folder on
    a filesystem smaller than the model: refused up front, exit 6, its own one line, and no
    hidden half-written folder."""
    ckpt = tmp_path / "ck"
    launch(tiny_args(ckpt, "--checkpoint-every", "2", "--no-export", steps=2), run_dir=tmp_path / "run")
    out, listing = tmp_path / "small", tmp_path / "listing.json"
    cmd = [
        *on_small_disk(out, 0.2), *listed_after(out, listing), PYTHON, "-m", "hyperlaunch.train.hf_export", "--checkpoint", str(ckpt / f"{MODEL}-2steps"), "--output", str(out / "hf"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=train_env(), timeout=300, check=False)
    assert done.returncode == 6, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hyperlaunch export: error: no room for the export of {MODEL}-2steps: it needs about "), lines
    assert f"in {out}, which has 204.0 KiB free" in lines[0] and "--dtype bf16" in lines[0]
    event = json.loads(done.stdout.strip().splitlines()[-1])
    assert event["event"] == "error" and event["exit_code"] == 6
    assert json.loads(listing.read_text())["entries"] == [], "nothing written on the small filesystem"
    assert ck.read_pointer(ckpt, MODEL) == f"{MODEL}-2steps"


def test_an_export_that_meets_a_full_disk_midway_leaves_the_older_export_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Room at the start, none halfway (another writer): DiskFull naming the folder, the
    unfinished folder removed, and the older export it was to replace still there, whole."""
    from hyperlaunch.core.errors import DiskFull
    from hyperlaunch.train import hf_export, safetensors_stream

    ckpt = tmp_path / "ck"
    launch(tiny_args(ckpt, "--checkpoint-every", "2", "--no-export", steps=2), run_dir=tmp_path / "run")
    checkpoint, out = ckpt / f"{MODEL}-2steps", tmp_path / "hf"
    hf_config, tokenizer = hf_export._source_of(checkpoint, None, None, None)
    hf_export.export_checkpoint(checkpoint, out, hf_config=hf_config, tokenizer=tokenizer)
    before = tree_digest(out)
    written = []

    def fills_up(self: safetensors_stream.StreamWriter, tensor: object) -> int:
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(tensor)
        return real_write(self, tensor)

    real_write = safetensors_stream.StreamWriter.write
    monkeypatch.setattr(safetensors_stream.StreamWriter, "write", fills_up)
    with pytest.raises(DiskFull) as raised:
        hf_export.export_checkpoint(checkpoint, out, hf_config=hf_config, tokenizer=tokenizer, overwrite=True)
    assert raised.value.one_line().startswith(f"exporting {MODEL}-2steps: no space left on device in {tmp_path} (it needs about ")
    assert "--dtype bf16" in raised.value.one_line()
    assert tree_digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [], "no unfinished folder left"


@pytest.fixture(autouse=True)
def _needs_mount_namespaces() -> None:
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, text=True, check=False)
    assert probe.returncode == 0, f"these tests mount a tmpfs in a namespace of their own: {probe.stderr.strip()}"
