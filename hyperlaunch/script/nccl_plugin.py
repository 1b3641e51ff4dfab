"""Where NCCL's network plugin for EFA (aws-ofi-nccl) is looked for, in one place: the batch
script looks on every node before training and logs what it found, and `doctor` probes the
compute nodes with the same shell (templates/partials/nccl_net.sh.j2). When NCCL cannot load
the plugin it falls back to TCP sockets without failing, which is slow between p4d/p5 nodes."""

from __future__ import annotations

PLUGIN_DIRS = ("/opt/amazon/ofi-nccl/lib", "/opt/aws-ofi-nccl/lib")
"""Where the EFA installer and the AWS Deep Learning images put the plugin; LD_LIBRARY_PATH's
folders are searched before these."""
PLUGIN_NAMES = ("libnccl-net.so", "libnccl-net-ofi.so", "libnccl-net-aws-ofi.so")
"""The plugin's file names across aws-ofi-nccl versions and images."""


def template_values() -> dict[str, tuple[str, ...]]:
    """What templates/partials/nccl_net.sh.j2 is rendered with."""
    return {"nccl_plugin_dirs": PLUGIN_DIRS, "nccl_plugin_names": PLUGIN_NAMES}
