"""The reliability tests' fixture: a directory nobody can write into."""

import os
import subprocess

import pytest


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory nobody can write into: a read-only tmpfs for root, a 0555 folder for everyone else."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(path)], capture_output=True).returncode != 0:
        pytest.skip("root cannot mount a read-only tmpfs here, and root writes through file modes")
    yield path
    subprocess.run(["umount", str(path)], check=True)
