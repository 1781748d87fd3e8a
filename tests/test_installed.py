"""The package as ``pip install .`` lays it out: the wheel carries the bundled examples and
``examples_dir()`` finds them there, away from any source checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE_EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel unpacked as an installer lays it into site-packages."""
    site = tmp_path_factory.mktemp("site-packages")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def test_the_wheel_carries_every_example(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        inside = sorted(Path(n).name for n in z.namelist() if n.startswith("sarek/examples/"))
    assert inside == SOURCE_EXAMPLES


def test_examples_dir_finds_the_examples_of_an_installed_package(installed: Path,
                                                                tmp_path: Path) -> None:
    script = ("import sarek\nfrom sarek.loader import examples_dir\n"
              "print(sarek.__file__)\nprint(examples_dir())\n")
    env = {**os.environ, "PYTHONPATH": str(installed)}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    package, examples = map(Path, done.stdout.split())
    assert package.parent == installed / "sarek"  # the unpacked copy, not the checkout
    assert examples == installed / "sarek" / "examples"
    assert sorted(p.name for p in examples.glob("*.py")) == SOURCE_EXAMPLES


def test_an_installed_package_has_no_recorded_results_and_a_checkout_has(installed: Path
                                                                         ) -> None:
    from sarek.demo import recorded_results

    assert recorded_results(installed / "sarek" / "examples") is None
    assert recorded_results(ROOT / "examples") == ROOT / "bench" / "results"


def test_the_wheel_says_it_is_typed(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        assert "sarek/py.typed" in z.namelist()
        metadata = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        assert "Classifier: Typing :: Typed" in z.read(metadata).decode()


@pytest.mark.parametrize("command", [["-m", "sarek", "--version"],
                                     ["-m", "sarek.cli", "--version"]], ids=["module", "cli"])
def test_python_m_sarek_prints_the_version(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0 and done.stdout.startswith("sarek ")
