"""Room on a filesystem: the check writers make before they write, and the ENOSPC/EDQUOT
behind a failed write, however deep DCP wraps it."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from hyperlaunch.core import disk_space
from hyperlaunch.core.errors import CheckpointError, DiskFull


def test_sizes_read_as_du_h_shows_them() -> None:
    assert disk_space.format_size(int(7.2 * 2**30)) == "7.2 GiB"
    assert disk_space.format_size(1789898) == "1.7 MiB"
    assert disk_space.format_size(0) == "0 B"


def test_the_free_space_of_a_folder_not_yet_made_is_its_filesystems(tmp_path: Path) -> None:
    measured = disk_space.free_bytes(tmp_path / "a" / "b" / "c")
    assert measured is not None and abs(measured - shutil.disk_usage(tmp_path).free) < 1 << 30  # others write meanwhile


def test_a_folder_that_cannot_be_looked_into_has_no_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(self: Path) -> bool:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "exists", denied)
    assert disk_space.free_bytes(tmp_path / "x") is None
    disk_space.check_room(tmp_path / "x", 1 << 50, "the export")  # cannot tell: no refusal


def test_too_little_room_with_its_margin_is_a_diskfull_naming_the_folder_and_both_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needed = 6 << 30
    free = needed + disk_space.slack(needed)
    monkeypatch.setattr(disk_space, "free_bytes", lambda folder: free)
    disk_space.check_room(tmp_path / "out", needed, "the export")  # room and margin: nothing happens
    with pytest.raises(DiskFull) as raised:
        disk_space.check_room(tmp_path / "out", needed + 1, "checkpoint m-20steps", hint="free space there")
    assert raised.value.one_line() == (
        f"no room for checkpoint m-20steps: it needs about 6.0 GiB in {tmp_path / 'out'}, which has 6.1 GiB free (free space there)"
    )
    assert isinstance(raised.value, CheckpointError) and raised.value.exit_code == 6
    assert disk_space.slack(needed) == needed // 50 + (1 << 20)


def test_a_hint_names_the_job_or_the_sweeps_element_hyperlaunch_knows() -> None:
    assert disk_space.job_reference({"SLURM_JOB_ID": "57"}) == "57"
    assert disk_space.job_reference({"SLURM_JOB_ID": "60", "SLURM_ARRAY_JOB_ID": "57", "SLURM_ARRAY_TASK_ID": "3"}) == "57_3"
    assert disk_space.job_reference({}) == "JOB"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_found_behind_causes_contexts_and_dcps_rank_failures(code: int) -> None:
    from torch.distributed.checkpoint.api import CheckpointException

    full = OSError(code, "full")
    assert disk_space.disk_full_cause(full) is full
    try:
        try:
            raise full
        except OSError:
            raise RuntimeError("write failed")  # noqa: B904 - the context is what is tested
    except RuntimeError as wrapped:
        assert disk_space.disk_full_cause(wrapped) is full
    dcp_error = CheckpointException("write", {0: (ValueError("other rank"), None), 3: (full, None)})
    assert disk_space.disk_full_cause(dcp_error) is full


def test_other_errors_are_not_a_full_disk() -> None:
    from torch.distributed.checkpoint.api import CheckpointException

    assert disk_space.disk_full_cause(OSError(errno.EACCES, "denied")) is None
    assert disk_space.disk_full_cause(CheckpointException("write", {1: (PermissionError(13, "denied"), None)})) is None
    assert disk_space.disk_full_cause(KeyboardInterrupt()) is None


def test_a_write_that_met_a_full_disk_names_the_reason_and_the_size_it_needed() -> None:
    err = disk_space.disk_full_error(OSError(errno.ENOSPC, "x"), Path("/fsx/ck"), "saving checkpoint m-4steps", needed=3 << 30, hint="h")
    assert err is not None
    assert err.one_line() == "saving checkpoint m-4steps: no space left on device in /fsx/ck (it needs about 3.0 GiB) (h)"
    quota = disk_space.disk_full_error(OSError(errno.EDQUOT, "x"), Path("/home/u"), "exporting m-4steps")
    assert quota is not None
    assert quota.one_line() == "exporting m-4steps: disk quota exceeded in /home/u"
    assert disk_space.disk_full_error(OSError(errno.EACCES, "denied"), Path("/home/u"), "exporting m-4steps") is None
