"""What differs between the Python versions the CLI runs on: 3.10 (the Ubuntu 22.04 of
HyperPod's login nodes) and later. Checked by tests/unit/project/test_python_versions.py."""

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same module as a backport, a dependency on 3.10 only (pyproject.toml)
    import tomli as tomllib

__all__ = ["tomllib"]
