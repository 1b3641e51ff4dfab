"""Slurm host lists (`node[1-3,5]`, `rack[1-2]-node[01-02]`, HyperPod's
`ip-10-1-38-[128,130]`) expanded into node names without calling Slurm: `status` reads
node lists from its one sacct call and must not run `scontrol show hostnames` per job.

The grammar is Slurm's (src/common/hostlist.c): names separated by commas outside
brackets; a name holds any number of bracket groups, each a comma list of numbers and
`low-high` ranges, zero-padded to the width of `low`; several groups multiply out, the
first varying slowest. python-hostlist does the same, but is GPL-2 licensed and this
parser is small. Text that is not a host list Slurm writes stays as it is.
"""

from __future__ import annotations

import itertools
import re

MAX_NAMES = 100_000
"""More names than any cluster has: a longer expansion is not a node list (kept as text)."""

_GROUP = re.compile(r"\[([^\[\]]*)\]")
_ITEM = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?")


def expand(hostlist: str) -> list[str]:
    """The node names of a host list, in Slurm's order (duplicates kept, as Slurm does)."""
    names: list[str] = []
    for part in _split_top_level(hostlist):
        names += _expand_name(part)
    return names


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets; an unclosed bracket runs to the end."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]" and depth:
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part for part in parts if part]


def _expand_name(name: str) -> list[str]:
    pieces: list[list[str]] = []  # literal text and the choices of each bracket group, in order
    position = 0
    total = 1
    for match in _GROUP.finditer(name):
        numbers = _numbers(match.group(1))
        if numbers is None:
            return [name]
        total *= len(numbers)
        if total > MAX_NAMES:
            return [name]
        pieces += [[name[position:match.start()]], numbers]
        position = match.end()
    tail = name[position:]
    if "[" in tail or "]" in tail:
        return [name]  # unbalanced: not something Slurm writes
    pieces.append([tail])
    return ["".join(choice) for choice in itertools.product(*pieces)]


def _numbers(group: str) -> list[str] | None:
    """`1-3,07` -> ['1', '2', '3', '07']; None when the group is not a range list."""
    numbers: list[str] = []
    for item in group.split(","):
        match = _ITEM.fullmatch(item)
        if match is None:
            return None
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low) or len(numbers) + int(high) - int(low) >= MAX_NAMES:
            return None
        width = len(low)
        numbers += [f"{number:0{width}d}" for number in range(int(low), int(high) + 1)]
    return numbers
