#!/usr/bin/env bash
# Build the hyperlaunch training image (./Dockerfile) and turn it into an enroot squashfs
# file that Pyxis runs: `hyperlaunch submit --container-image <output>.sqsh ...`.
#
#   docker build -t NAME:TAG .
#   enroot import -o OUTPUT dockerd://NAME:TAG
#
# Put OUTPUT on the shared filesystem (e.g. /fsx) so every node can read it.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: setup-pyxis.sh [--name NAME] [--tag TAG] [--output FILE.sqsh] [--base-image IMAGE]
                      [--no-efa] [--datasets] [--dry-run] [-- DOCKER_BUILD_ARGS...]

Build the training image from the Dockerfile next to this script, then import it into a
squashfs file for Pyxis. It runs:

  docker build -t NAME:TAG [--build-arg ...] [DOCKER_BUILD_ARGS...] <this directory>
  enroot import -o OUTPUT dockerd://NAME:TAG

then use it with: hyperlaunch submit --container-image OUTPUT ...
The image has EFA's libfabric and the aws-ofi-nccl plugin unless --no-efa (the build then
needs to reach AWS's EFA installer download). A rebuilt OUTPUT gets a new container name on
the nodes by itself (hyperlaunch names containers after the file's size and mtime).

Options:
  --name NAME         image name [default: hyperlaunch]
  --tag TAG           image tag [default: latest]
  --output FILE       squashfs file to write [default: ./NAME.sqsh, NAME's last part]
  --base-image IMAGE  CUDA PyTorch base image (--build-arg BASE_IMAGE) [default: the Dockerfile's]
  --no-efa            leave out EFA and aws-ofi-nccl (--build-arg INSTALL_EFA=0): CPU or dev clusters
  --datasets          add Hugging Face datasets, for --data folders written by save_to_disk
                      (--build-arg INSTALL_DATASETS=1)
  --dry-run           print the commands, run nothing
  -h, --help          show this help
  -- ARGS...          extra arguments for docker build (e.g. --build-arg EFA_INSTALLER_VERSION=1.41.0)

Examples:
  ./setup-pyxis.sh
  ./setup-pyxis.sh --name qwen-train --tag v1 --output /fsx/images/qwen-train.sqsh
  ./setup-pyxis.sh --datasets --dry-run
  ./setup-pyxis.sh --no-efa --dry-run -- --build-arg EFA_INSTALLER_VERSION=1.41.0
USAGE
}

die() {
    printf 'setup-pyxis.sh: error: %s\n' "$*" >&2
    exit 1
}

name="hyperlaunch"
tag="latest"
output=""
dry_run=0
image_args=()
build_args=()

while [[ $# -gt 0 ]]; do
    case "$1" in
        --name) [[ $# -ge 2 && -n "$2" ]] || die "--name needs a value"; name="$2"; shift 2 ;;
        --name=*) name="${1#*=}"; shift ;;
        --tag) [[ $# -ge 2 && -n "$2" ]] || die "--tag needs a value"; tag="$2"; shift 2 ;;
        --tag=*) tag="${1#*=}"; shift ;;
        --output | -o) [[ $# -ge 2 && -n "$2" ]] || die "--output needs a value"; output="$2"; shift 2 ;;
        --output=*) output="${1#*=}"; shift ;;
        --base-image) [[ $# -ge 2 && -n "$2" ]] || die "--base-image needs a value"; image_args+=(--build-arg "BASE_IMAGE=$2"); shift 2 ;;
        --base-image=*) [[ -n "${1#*=}" ]] || die "--base-image needs a value"; image_args+=(--build-arg "BASE_IMAGE=${1#*=}"); shift ;;
        --no-efa) image_args+=(--build-arg INSTALL_EFA=0); shift ;;
        --datasets) image_args+=(--build-arg INSTALL_DATASETS=1); shift ;;
        --dry-run) dry_run=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; build_args=("$@"); break ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done

# Docker's reference grammar, loosely: lower-case name components, a tag of word characters.
[[ "$name" =~ ^[a-z0-9]+([._/-][a-z0-9]+)*$ ]] || die "invalid image name '$name' (lower-case letters, digits, . _ - /)"
[[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "invalid tag '$tag' (letters, digits, _ . -; at most 128)"
if [[ -z "$output" ]]; then
    output="${name##*/}.sqsh"
fi
[[ "$output" == *.sqsh ]] || die "--output must end in .sqsh (got '$output')"

# Build from the directory holding this script and the Dockerfile, wherever it is run from
# (parameter expansion, not dirname: the errors below must work even with a bare PATH).
script_dir="${BASH_SOURCE[0]%/*}"
[[ "$script_dir" != "${BASH_SOURCE[0]}" ]] || script_dir="."
context="$(cd "$script_dir" && pwd)"
[[ "$output" == /* ]] || output="$PWD/${output#./}"
image="${name}:${tag}"
build_cmd=(docker build -t "$image" "${image_args[@]}" "${build_args[@]}" "$context")
import_cmd=(enroot import -o "$output" "dockerd://${image}")

show() {
    printf '%q' "$1"
    shift
    printf ' %q' "$@"
    printf '\n'
}

if [[ "$dry_run" -eq 1 ]]; then
    show "${build_cmd[@]}"
    show "${import_cmd[@]}"
    exit 0
fi

command -v docker >/dev/null 2>&1 || die "docker not found on PATH (install Docker, or build on a machine that has it and copy the .sqsh)"
command -v enroot >/dev/null 2>&1 || die "enroot not found on PATH (install enroot: https://github.com/NVIDIA/enroot)"
[[ -f "$context/Dockerfile" ]] || die "no Dockerfile in $context"
[[ ! -e "$output" ]] || die "$output already exists (remove it first; enroot does not overwrite)"

"${build_cmd[@]}"
"${import_cmd[@]}"
echo "wrote $output; run with: hyperlaunch submit --container-image $output ..."
