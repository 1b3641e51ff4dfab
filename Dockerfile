# The hyperlaunch training image: a CUDA PyTorch base with hyperlaunch installed, so that
# `torchrun --no-python hyperlaunch-train` runs inside a Pyxis/enroot container on the nodes,
# with EFA and the aws-ofi-nccl plugin so NCCL talks over EFA between nodes.
# Turn it into a .sqsh for `hyperlaunch submit --container-image` with ./setup-pyxis.sh, or
# push it to ECR and run `hyperlaunch ecr-login` (docs/hyperpod.md, "Containers and ECR").
#
#   docker build -t hyperlaunch:latest .
#   docker build --build-arg BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime -t hyperlaunch:latest .
#   docker build --build-arg INSTALL_DATASETS=1 -t hyperlaunch:datasets .   # --data DIR from save_to_disk
#   docker build --build-arg INSTALL_EFA=0 -t hyperlaunch:noefa .           # CPU/dev clusters, no AWS network
#
# EFA / NCCL (AWS's HyperPod FSDP scripts, awsome-distributed-training, AWS's DLC images):
# - The nodes' EFA kernel driver comes from the host; the container needs only the user-space
#   libfabric with its efa provider plus the aws-ofi-nccl plugin (libnccl-net.so). Without the
#   plugin NCCL silently falls back to TCP sockets: much slower, no error.
# - Why the EFA installer on this base, on by default (INSTALL_EFA=1), rather than an AWS base
#   image that ships both (the Deep Learning Containers): a DLC fixes the torch build and can only
#   be pulled after logging in to AWS's own ECR account, while the installer, run in user-space
#   mode (--skip-kmod: no kernel module) as AWS's DLC Dockerfiles do, adds libfabric and the plugin
#   under /opt/amazon to any CUDA PyTorch base (BASE_IMAGE). The build fails if the plugin is
#   missing afterwards, rather than shipping an image that quietly runs NCCL over TCP.
# - The per-instance EFA/NCCL variables are NOT set here (nor FI_PROVIDER=efa, which only
#   aws-ofi-nccl <= 1.5 needs): the sbatch script exports them from hyperlaunch's
#   env/<family>.toml preset for the instance type, so the same
#   image also runs on g5/g6 and CPU nodes. Inside a container NCCL_SOCKET_IFNAME is
#   `^docker0,lo` (the presets' container_env).
# - Check a job with `--nccl-debug INFO`: NET/OFI means EFA, NET/Socket means TCP. If NCCL logs
#   "libnccl-net.so: cannot open shared object file", pass
#   `--env LD_PRELOAD=/usr/local/cuda-<ver>/lib/libnccl.so` or check LD_LIBRARY_PATH below.

# A base with torch >= 2.7, as pyproject.toml's `train` extra asks: the save signal before a time
# limit reaches the trainers from the step script, not through torchrun's signal forwarding
# (which covers USR2 only since torch 2.9).
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.04-py3
FROM ${BASE_IMAGE}

ARG INSTALL_EFA=1
# The installer ships the aws-ofi-nccl plugin since 1.39; older ones need it built separately.
ARG EFA_INSTALLER_VERSION=1.41.0
# The trainer reads a --data folder written by Hugging Face `save_to_disk` only with `datasets`.
ARG INSTALL_DATASETS=0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# libfabric (efa provider) + aws-ofi-nccl from the AWS EFA installer, user space only
# (--skip-kmod: the driver belongs to the host; --skip-limit-conf: limits are the host's too).
# The installer runs from its own folder (DL3003); curl and friends are build tools whose
# versions the base image's distribution decides (DL3008).
# hadolint ignore=DL3003,DL3008
RUN if [ "${INSTALL_EFA}" = "1" ]; then \
        apt-get update && apt-get install -y --no-install-recommends curl ca-certificates pciutils && \
        cd /tmp && \
        curl -fsSL "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" | tar xz && \
        cd aws-efa-installer && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify && \
        cd / && rm -rf /tmp/aws-efa-installer && rm -rf /var/lib/apt/lists/* && \
        plugin="$(find /opt/amazon -name 'libnccl-net*.so' -print -quit)" && \
        if [ -z "${plugin}" ]; then \
            echo "EFA installer ${EFA_INSTALLER_VERSION} left no aws-ofi-nccl plugin (libnccl-net*.so) under /opt/amazon; use 1.39 or newer" >&2; \
            exit 1; \
        fi && \
        mkdir -p /opt/amazon/ofi-nccl/lib && \
        for name in libnccl-net.so libnccl-net-ofi.so; do \
            [ -e "/opt/amazon/ofi-nccl/lib/${name}" ] || ln -s "${plugin}" "/opt/amazon/ofi-nccl/lib/${name}"; \
        done; \
    fi

# Where the EFA installer puts libfabric and the NCCL plugin (under both names NCCL looks for:
# libnccl-net.so by default, libnccl-net-ofi.so with NCCL_NET_PLUGIN=ofi), ahead of the base
# image's own paths: NGC images carry other NCCL net plugins (HPC-X's, for InfiniBand) that NCCL
# would otherwise load first. A base image that sets NCCL_NET_PLUGIN to its own plugin needs
# `--env NCCL_NET_PLUGIN=ofi` on the job. Harmless when absent (INSTALL_EFA=0).
ENV LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:/opt/amazon/efa/lib:${LD_LIBRARY_PATH}
ENV PATH=/opt/amazon/efa/bin:${PATH}
# The HyperPod scripts' settings that hold on every instance type. Not their
# TORCH_NCCL_BLOCKING_WAIT=1: it makes every wait on a collective block the CPU until the GPU is
# done (no overlap of the next kernels' launch with communication), and what it guarded against,
# a hung collective, is what the trainer's hang watchdog and torch's NCCL watchdog catch.
ENV HF_HUB_ETAG_TIMEOUT=60 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/hyperlaunch
COPY pyproject.toml README.md ./
COPY hyperlaunch ./hyperlaunch
COPY train ./train
COPY templates ./templates
COPY env ./env

# The base image's torch is built for its CUDA and NCCL: never let pip replace it. hyperlaunch
# goes in with --no-deps, then its other dependencies from pyproject.toml (the CLI's, the
# trainer's `train` extra, the `trackers` extra for --tracker and the `gpu` extra for the fused
# loss --loss auto takes on a GPU), torch left out, and the installed torch pinned as a constraint so
# that no dependency of theirs pulls another one in. tomllib: the base images named above ship
# Python 3.11+.
RUN python -m pip install --no-deps . && \
    python -c 'import re, tomllib; project = tomllib.load(open("pyproject.toml", "rb"))["project"]; deps = project["dependencies"] + project["optional-dependencies"]["train"] + project["optional-dependencies"]["trackers"] + project["optional-dependencies"]["gpu"]; print("\n".join(d for d in deps if re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() != "torch"))' > /tmp/requirements.txt && \
    python -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' > /tmp/constraints.txt && \
    if [ "${INSTALL_DATASETS}" = "1" ]; then echo "datasets>=2.14" >> /tmp/requirements.txt; fi && \
    python -m pip install -c /tmp/constraints.txt -r /tmp/requirements.txt && \
    rm /tmp/requirements.txt /tmp/constraints.txt && \
    hyperlaunch-train --help > /dev/null && \
    python -c "import torch, hyperlaunch.train; print('torch', torch.__version__, 'cuda', torch.version.cuda)" && \
    hyperlaunch --help > /dev/null

WORKDIR /workspace
CMD ["hyperlaunch", "--help"]
