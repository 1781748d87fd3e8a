"""Every command the README shows, run as written from the built wheel installed into a fresh
virtual environment, in a folder that is not the checkout.

The environment has the wheel and, linked into its site-packages, the dependencies installed
for this interpreter (not the checkout's editable sarek). The README's placeholders
(``FILE.py:KERNEL``, ``args.npz``) become the README's own kernel saved to a file and its
arguments. A command for a device target ends, without the device, with the one-line "no
device" message and exit status 3."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README) if lang == language]


def commands() -> list[str]:
    """The ``sarek`` commands of the README's shell blocks, without their comments (the
    set-up block's ``make`` commands need the checkout and are what CI itself runs)."""
    out = []
    for body in blocks("sh"):
        for line in body.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command.startswith("sarek "):
                out.append(command)
    return out


PLACEHOLDERS = {"FILE.py:KERNEL": "mine.py:matmul", "args.npz": "args.npz"}
SLOW = {"sarek demo"}  # the demo's content is tested at a small size in test_cli_demo


def _device_reason(target: str) -> str | None:
    from backends import registry

    return registry.target(target).device_reason()


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed (and its console script)."""
    env = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    purelib = subprocess.run([str(python), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies as installed here, each linked in (not the checkout's editable sarek)
    for here in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for entry in Path(here).iterdir():
            if not re.match(r"(_editable_impl_)?sarek\b", entry.name):
                Path(purelib, entry.name).symlink_to(entry)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return env


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder away from the checkout holding the README's kernel as ``mine.py`` and an
    ``args.npz`` for it (64 x 64 x 64, grid 4,4,1 and block 16,16,1, as the README runs it)."""
    here = tmp_path_factory.mktemp("user")
    python = blocks("python")[0]
    kernel = python[:python.index("M, N, K =")]  # the imports and the kernel
    (here / "mine.py").write_text(kernel)
    rng = np.random.default_rng(0)
    n = 64
    np.savez(here / "args.npz", a=rng.standard_normal(n * n, dtype=np.float32),
             b=rng.standard_normal(n * n, dtype=np.float32), c=np.zeros(n * n, np.float32),
             m=np.int32(n), n=np.int32(n), k=np.int32(n))
    return here


def run(venv: Path, workdir: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "SAREK_CACHE_DIR": str(workdir / "cache")}
    env.pop("PYTHONPATH", None)
    return subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_readme_shows_the_commands_this_test_runs() -> None:
    shown = commands()
    assert len(shown) >= 10 and "sarek demo" in shown
    assert all(any(c.split()[1] == name for c in shown)
               for name in ("simulate", "analyze", "rewrite", "emit", "conformance", "ir"))


@pytest.mark.parametrize("command", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW
                                     else c for c in commands()])
def test_a_readme_command_runs_from_the_installed_package(venv: Path, workdir: Path,
                                                          command: str) -> None:
    for placeholder, value in PLACEHOLDERS.items():
        command = command.replace(placeholder, value)
    done = run(venv, workdir, command.split())
    device = re.search(r"conformance --target (\w[\w-]*)", command)
    if device and not device.group(1).startswith("sim-") and (
            why := _device_reason(device.group(1))) is not None:
        assert done.returncode == 3, done.stderr
        assert done.stderr.count("\n") == 1
        assert done.stderr.startswith(f"sarek conformance: no device for target "
                                      f"{device.group(1)}: {why}")
        return
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    for produced in re.findall(r"(?:--out|-o|--report) (\S+)", command):
        assert (workdir / produced).is_file()


def test_the_installed_command_is_the_wheel(venv: Path, workdir: Path) -> None:
    done = run(venv, workdir, ["python", "-c", "import sarek; print(sarek.__file__)"])
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(venv)


def test_the_readme_python_runs_from_the_installed_package(venv: Path, workdir: Path) -> None:
    """The README's Python blocks, one script in their order (the second uses the first's
    names), printing what the first says it prints."""
    script = workdir / "readme_snippets.py"
    script.write_text("\n".join(blocks("python")))
    done = run(venv, workdir, ["python", str(script)])
    assert done.returncode == 0, done.stderr[-3000:]
    error = float(done.stdout.split()[0])  # the first block's max |C - A @ B|
    assert 0 <= error < 1e-4
