"""Rendezvous ports claimed on the head node (hyperlaunch.supervisor.ports): two supervisors
choosing in the seconds before either store binds do not choose the same port."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from hyperlaunch.supervisor import ports
from hyperlaunch.supervisor.decisions import job_port, rendezvous_port


@pytest.fixture(autouse=True)
def _own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def test_a_claim_holds_a_port_for_its_round_until_released_or_stale(tmp_path: Path) -> None:
    assert ports.claim(26000, "1000.0") and ports.claim(26000, "1000.0")  # its own, again
    assert not ports.claim(26000, "1625.0")
    later = os.stat(tmp_path / "hyperlaunch-rendezvous-26000").st_mtime + ports.CLAIM_TTL_S + 1
    assert ports.claim(26000, "1625.0", now=later)  # a stale claim (its round long started) gives way
    ports.release(26000, "1000.0")  # not its claim any more: left alone
    assert (tmp_path / "hyperlaunch-rendezvous-26000").read_text() == "1625.0"
    ports.release(26000, "1625.0")
    assert not (tmp_path / "hyperlaunch-rendezvous-26000").exists()


def test_a_link_in_the_claims_place_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / "hyperlaunch-rendezvous-26000").symlink_to(victim)
    assert not ports.claim(26000, "1000.0")  # fresh: someone's, whoever it is
    ports.release(26000, "mine")
    assert victim.read_text() == "mine" and (tmp_path / "hyperlaunch-rendezvous-26000").is_symlink()


def test_two_jobs_sharing_a_port_choose_apart_before_either_store_binds() -> None:
    assert job_port("1000", 0) == job_port("1625", 0) == 26000

    def taken(owner: str):
        return lambda port: ports.in_use(port) or not ports.claim(port, owner)

    first = rendezvous_port("1000", 0, taken("1000.0"))
    second = rendezvous_port("1625", 0, taken("1625.0"))
    assert second != first and rendezvous_port("1000", 0, taken("1000.0")) == first  # 26000 and 26001 where both are free
