"""Slurm host lists as real clusters write them, expanded without calling Slurm."""

from __future__ import annotations

import pytest

from hyperlaunch.runs.attempts import failed_nodes
from hyperlaunch.slurm import hostlist
from hyperlaunch.slurm.accounting import Attempt, NodeEvent


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("node[1,3],gpu7", ["node1", "node3", "gpu7"]),
        ("ip-10-1-[01-02]", ["ip-10-1-01", "ip-10-1-02"]),
        ("single", ["single"]),
        ("", []),
        # several bracket groups multiply out, the first varying slowest
        ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
        # HyperPod: ip- and the address with dashes, the last octet bracketed
        ("ip-10-1-38-[128,130]", ["ip-10-1-38-128", "ip-10-1-38-130"]),
        ("ip-10-1-38-[128-129],ip-10-1-40-7", ["ip-10-1-38-128", "ip-10-1-38-129", "ip-10-1-40-7"]),
        ("ip-10-1-[38,40]-[7,9]", ["ip-10-1-38-7", "ip-10-1-38-9", "ip-10-1-40-7", "ip-10-1-40-9"]),
        # zero padding follows the low end; a range crossing a power of ten keeps it
        ("n[008-010]", ["n008", "n009", "n010"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("a[1-2]b,c[3]", ["a1b", "a2b", "c3"]),
    ],
)
def test_host_lists_expand_like_slurm(text: str, names: list[str]) -> None:
    assert hostlist.expand(text) == names


@pytest.mark.parametrize("text", ["node[a-b]", "node[3-1]", "node[1-2", "node]1[", "node[]", "n[1-99999999]"])
def test_text_that_is_not_a_host_list_stays_as_it_is(text: str) -> None:
    assert hostlist.expand(text) == [text]


def test_a_failed_hyperpod_node_is_found_in_a_bracketed_node_list() -> None:
    attempt = Attempt("7", "NODE_FAIL", "ip-10-1-38-[128,130]", "2026-01-01T00:00:00", "2026-01-01T00:01:00", "0:0")
    events = [
        NodeEvent("ip-10-1-38-130", "2026-01-01T00:00:30", "", "DOWN", "Not responding"),
        NodeEvent("ip-10-1-38-129", "2026-01-01T00:00:30", "", "DOWN", "another job's node"),
    ]
    assert failed_nodes(attempt, events) == ["ip-10-1-38-130"]
