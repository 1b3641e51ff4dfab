# The hyperlaunch training image: a CUDA PyTorch base with hyperlaunch installed, so that
# `torchrun --no-python hyperlaunch-train` runs inside a Pyxis/enroot container on the nodes.
# Turn it into a .sqsh for `hyperlaunch submit --container-image` with ./setup-pyxis.sh.
#
#   docker build -t hyperlaunch:latest .
#   docker build --build-arg BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime -t hyperlaunch:latest .
#   docker build --build-arg INSTALL_EFA=1 -t hyperlaunch:efa .
#
# EFA / NCCL expectations (AWS's HyperPod FSDP scripts, awsome-distributed-training):
# - The nodes' EFA kernel driver comes from the host; the container needs only the user-space
#   libfabric with its efa provider plus the aws-ofi-nccl plugin (libnccl-net.so). Without the
#   plugin NCCL silently falls back to TCP sockets: much slower, no error.
# - INSTALL_EFA=1 runs the AWS EFA installer in user-space mode (no kernel module), which
#   provides both under /opt/amazon. Recent NGC PyTorch images may already ship them; the
#   default (0) leaves the image as the base made it, and builds without network access to AWS.
# - The per-instance EFA/NCCL variables are NOT set here (nor FI_PROVIDER=efa, which only
#   aws-ofi-nccl <= 1.5 needs): the sbatch script exports them from hyperlaunch's
#   env/<family>.toml preset for the instance type, so the same
#   image also runs on g5/g6 and CPU nodes. Inside a container NCCL_SOCKET_IFNAME is
#   `^docker0,lo` (the presets' container_env).
# - If NCCL logs "libnccl-net.so: cannot open shared object file", pass
#   `--env LD_PRELOAD=/usr/local/cuda-<ver>/lib/libnccl.so` or check LD_LIBRARY_PATH below.

# A base with torch >= 2.7, as pyproject.toml's `train` extra asks: the save signal before a time
# limit reaches the trainers from the step script, not through torchrun's signal forwarding
# (which covers USR2 only since torch 2.9).
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.04-py3
FROM ${BASE_IMAGE}

ARG INSTALL_EFA=0
ARG EFA_INSTALLER_VERSION=1.38.1

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Optional: libfabric (efa provider) + aws-ofi-nccl from the AWS EFA installer, user space only
# (--skip-kmod: the driver belongs to the host; --skip-limit-conf: limits are the host's too).
RUN if [ "${INSTALL_EFA}" = "1" ]; then \
        apt-get update && apt-get install -y --no-install-recommends curl ca-certificates pciutils && \
        cd /tmp && \
        curl -fsSL "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" | tar xz && \
        cd aws-efa-installer && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify && \
        cd / && rm -rf /tmp/aws-efa-installer && rm -rf /var/lib/apt/lists/*; \
    fi

# Where the EFA installer puts libfabric and the NCCL plugin; harmless when absent.
ENV LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:/opt/amazon/efa/lib:${LD_LIBRARY_PATH}
ENV PATH=/opt/amazon/efa/bin:${PATH}
# The HyperPod scripts' settings that hold on every instance type.
ENV TORCH_NCCL_BLOCKING_WAIT=1 \
    HF_HUB_ETAG_TIMEOUT=60 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/hyperlaunch
COPY pyproject.toml README.md ./
COPY hyperlaunch ./hyperlaunch
COPY train ./train
COPY templates ./templates
COPY env ./env

# The base image's torch is built for its CUDA and NCCL: never let pip replace it. hyperlaunch
# goes in with --no-deps, then its other dependencies from pyproject.toml (the CLI's and the
# trainer's `train` extra), torch left out. tomllib: the base images named above ship Python 3.11+.
RUN python -m pip install --no-deps . && \
    python -c 'import re, tomllib; project = tomllib.load(open("pyproject.toml", "rb"))["project"]; deps = project["dependencies"] + project["optional-dependencies"]["train"]; print("\n".join(d for d in deps if re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() != "torch"))' > /tmp/requirements.txt && \
    python -m pip install -r /tmp/requirements.txt && \
    rm /tmp/requirements.txt && \
    hyperlaunch-train --help > /dev/null && \
    python -c "import torch, hyperlaunch.train; print('torch', torch.__version__, 'cuda', torch.version.cuda)" && \
    hyperlaunch --help > /dev/null

WORKDIR /workspace
CMD ["hyperlaunch", "--help"]
