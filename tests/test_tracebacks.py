"""An error raised by sarek on the user's behalf reaches the user with sarek's own frames left
out of its traceback (``sarek.errors.user_facing``): the user's line comes last before the
message. ``SAREK_TRACEBACK=1`` keeps every frame."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

HEAD = """import numpy as np
import sarek
from sarek import Global, f32, i32, thread_idx
"""

SCRIPTS = {
    "a kernel the DSL refuses": HEAD + """
@sarek.kernel
def k(a: Global[f32], n: i32):
    i = thread_idx.x
    a[i, 0] = 1.0
""",
    "a launch that reads out of bounds": HEAD + """
@sarek.kernel
def k(a: Global[f32], n: i32):
    i = thread_idx.x
    a[i] = 1.0

k.with_options(target="sim")[1, 4](np.zeros(2, np.float32), 4)
""",
    "a bad launch option": HEAD + """
@sarek.kernel
def k(a: Global[f32], n: i32):
    a[thread_idx.x] = 1.0

k.with_options(target="sim", precision="exact")
""",
    "simulating a kernel with a missing argument": HEAD + """
@sarek.kernel
def k(a: Global[f32], n: i32):
    a[thread_idx.x] = 1.0

sarek.simulate(k.ir, {"a": np.zeros(4, np.float32)}, grid=1, block=4)
""",
}


def frames(stderr: str) -> list[str]:
    return re.findall(r'^  File "([^"]+)", line \d+', stderr, re.M)


def run(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "user.py"
    path.write_text(script)
    environment = {k: v for k, v in os.environ.items() if k != "SAREK_TRACEBACK"}
    environment |= {"PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          cwd=tmp_path, env=environment)


@pytest.mark.parametrize("case", SCRIPTS)
def test_the_traceback_shows_the_users_line_and_one_frame_of_sarek(case: str,
                                                                   tmp_path: Path) -> None:
    done = run(SCRIPTS[case], tmp_path)
    assert done.returncode == 1
    shown = frames(done.stderr)
    ours = [f for f in shown if Path(f).resolve().is_relative_to(ROOT)]
    assert shown[0] == str(tmp_path / "user.py")
    assert [Path(f).name for f in ours] == ["errors.py"]  # the re-raise, which says how to see all
    assert "SAREK_TRACEBACK=1" in done.stderr
    assert re.search(r"^sarek\.errors\.\w+: ", done.stderr, re.M)


def test_sarek_traceback_keeps_every_frame(tmp_path: Path) -> None:
    done = run(SCRIPTS["a kernel the DSL refuses"], tmp_path, SAREK_TRACEBACK="1")
    ours = [f for f in frames(done.stderr) if Path(f).resolve().is_relative_to(ROOT)]
    assert len(ours) > 5 and any("dsl" in f for f in ours)
