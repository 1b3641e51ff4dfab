"""The error vocabulary of a step's output exists once (hyperlaunch.core.error_lines): what the
supervisor takes for a consequence of another task's failure when it decides a round is
unfixable, `status` also skips when it names a crash's root cause."""

from __future__ import annotations

import pytest

from hyperlaunch.core.error_lines import CONSEQUENCE_ERRORS, CONSEQUENCE_WORDS, is_consequence, root_error_line
from hyperlaunch.supervisor.step_errors import unfixable_error

_CAUSE = "[rank0]: ValueError: labels has 3 columns, the model 2"


@pytest.mark.parametrize(
    "reaction",
    [
        "[rank1]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1.",
        "[rank1]: torch.distributed.DistStoreError: Socket Timeout",
        "[rank1]: torch.distributed.elastic.rendezvous.api.RendezvousClosedError: ",
        "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4242",
    ],
)
def test_a_peers_reaction_printed_first_is_never_the_root_error(reaction: str) -> None:
    assert is_consequence(reaction)
    assert root_error_line([reaction, _CAUSE, "srun: error: node1: task 0: Exited with exit code 1"]) == _CAUSE.strip()


def test_the_supervisor_and_status_skip_the_same_reactions() -> None:
    cause = ["0: Traceback (most recent call last):", "0: NameError: name 'x' is not defined"]
    for word in (*CONSEQUENCE_ERRORS, *CONSEQUENCE_WORDS):
        reaction = f"1: RuntimeError: {word}: peer 0 went away" if word in CONSEQUENCE_WORDS else f"1: torch.distributed.{word}: peer gone"
        assert unfixable_error([*cause, reaction])[0] == "NameError: name 'x' is not defined", word
        assert root_error_line([reaction.partition(": ")[2], *cause]) == "NameError: name 'x' is not defined", word
