"""Install the Debian packages a dev cluster needs, only those that are missing, and munge's key
when it is gone."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from hyperlaunch.core.errors import ClusterError

# binary -> Debian package that provides it
REQUIRED_BINARIES: dict[str, str] = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "slurmdbd": "slurmdbd",
    "munged": "munge",
    "mariadbd": "mariadb-server",
}
SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def find_binary(name: str) -> str | None:
    """Daemons live in sbin, which a non-login PATH may lack."""
    return shutil.which(name) or next(
        (os.path.join(d, name) for d in SBIN_DIRS if os.access(os.path.join(d, name), os.X_OK)), None
    )


def missing_packages() -> list[str]:
    return sorted({pkg for binary, pkg in REQUIRED_BINARIES.items() if find_binary(binary) is None})


INSTALL_LOCK = Path("/var/lock/hyperlaunch-dev-cluster-install.lock")
"""One install per machine at a time: several `dev-cluster up` (parallel test workers, two
shells) would otherwise race apt-get for the dpkg lock and all but one would fail."""


def ensure_installed(progress: Callable[[str], None]) -> None:
    if not missing_packages():
        return
    with _install_lock(progress):
        _install_missing(progress)  # the one we waited for may have installed everything


@contextlib.contextmanager
def _install_lock(progress: Callable[[str], None]) -> Iterator[None]:
    INSTALL_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(INSTALL_LOCK, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another dev-cluster install is running; waiting for it to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _install_missing(progress: Callable[[str], None]) -> None:
    packages = missing_packages()
    if not packages:
        return
    if shutil.which("apt-get") is None:
        raise ClusterError(
            f"missing {', '.join(packages)} and apt-get is not available",
            hint="install these Debian/Ubuntu packages by hand: " + " ".join(sorted(set(REQUIRED_BINARIES.values()))),
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    progress(f"installing {' '.join(packages)} with apt-get (a minute or two)")
    for args in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *packages]):
        proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-1:]) or f"exit {proc.returncode}"
            raise ClusterError(f"'{' '.join(args[:2])}' failed: {tail}")
    still = missing_packages()
    if still:
        raise ClusterError(f"apt-get finished but {', '.join(still)} still missing")


def ensure_munge_key(key: Path, progress: Callable[[str], None]) -> None:
    """The machine's munge key, made as munge's package makes it when it is missing (someone
    removed it): by mungekey, owned by munge's user, which a system munged runs as."""
    if key.exists():
        return
    with _install_lock(progress):
        if not key.exists():  # the `up` we waited for may have made it
            _make_munge_key(key, progress)


def _make_munge_key(key: Path, progress: Callable[[str], None]) -> None:
    progress(f"creating munge's key {key} (munge's package made none, or it was removed)")
    key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    mungekey = find_binary("mungekey")
    if mungekey is None:
        raise ClusterError(f"munge's key {key} is missing and mungekey (munge 0.5.14+) is not here to make one")
    made = subprocess.run([mungekey, "--create", f"--keyfile={key}"], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise ClusterError(f"could not create munge's key {key}: {(made.stderr or made.stdout).strip()}")
    try:
        owner = pwd.getpwnam("munge")
    except KeyError:
        return
    for path in (key.parent, key):
        os.chown(path, owner.pw_uid, owner.pw_gid)
