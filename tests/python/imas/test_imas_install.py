"""The systemd unit works from any install prefix: `make install PREFIX=P`
writes it with P's imasd, and systemd accepts it (systemd-analyze verify
checks that ExecStart names an executable); `imasd --print-unit` gives the
same for the imasd one runs."""
import os
import shutil
import subprocess

import pytest

from slabkit.env import SOURCE_ROOT as ROOT, build_dir

BUILD = build_dir()


def verify(unit):
    if not shutil.which("systemd-analyze"):
        return None
    return subprocess.run(["systemd-analyze", "verify", unit], capture_output=True, text=True)


@pytest.mark.skipif(not shutil.which("make"), reason="make is not installed")
def test_unit_installed_with_its_prefix(tmp_path):
    prefix = tmp_path / "elsewhere" / "prefix"         # nothing like /opt/slabkit
    r = subprocess.run(["make", "-s", "install", f"PREFIX={prefix}", f"BUILD={os.path.relpath(BUILD, ROOT)}"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    unit = prefix / "lib/systemd/user/imasd.service"
    text = unit.read_text()
    assert f"ExecStart={prefix}/bin/imasd --quiet" in text and "@" not in text.split("[Unit]")[1]
    assert os.access(prefix / "bin/imasd", os.X_OK)
    v = verify(str(unit))
    assert v is None or v.returncode == 0, v.stderr


def test_print_unit(tmp_path):
    imasd = os.path.join(BUILD, "bin", "imasd")
    if not os.path.exists(imasd):
        pytest.skip("imasd not built")
    r = subprocess.run([imasd, "--print-unit"], capture_output=True, text=True)
    assert r.returncode == 0 and f"ExecStart={imasd} --quiet" in r.stdout
    unit = tmp_path / "imasd.service"
    unit.write_text(r.stdout)
    v = verify(str(unit))
    assert v is None or v.returncode == 0, v.stderr
