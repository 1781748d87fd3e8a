"""The compiled-kernel cache (``sarek.cache``): what it keeps, and what it survives."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from sarek.cache import Cache, key

PAYLOAD = bytes(range(256)) * 40


def test_a_put_entry_comes_back_from_a_fresh_cache_on_the_same_folder(tmp_path: Path) -> None:
    Cache("cuda", tmp_path).put("k1", PAYLOAD)
    fresh = Cache("cuda", tmp_path)  # what a new process sees
    assert fresh.get("k1") == PAYLOAD and fresh.hits == 1


@pytest.mark.parametrize("damage", [
    lambda raw: raw[: len(raw) // 2],                     # truncated
    lambda raw: raw[:100] + bytes([raw[100] ^ 1]) + raw[101:],  # one bit flipped
    lambda raw: b"",                                      # emptied
], ids=["truncated", "bit-flip", "empty"])
def test_a_damaged_entry_is_a_miss_and_is_rebuilt(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    Cache("cuda", tmp_path).put("k1", PAYLOAD)
    path = tmp_path / "cuda" / "k1.bin"
    path.write_bytes(damage(path.read_bytes()))
    fresh = Cache("cuda", tmp_path)
    assert fresh.get("k1") is None and not path.exists()
    made = fresh.get_or_make("k1", lambda: PAYLOAD)
    assert made == PAYLOAD and Cache("cuda", tmp_path).get("k1") == PAYLOAD


def _fill(folder: str, n: int) -> int:
    cache = Cache("cuda", Path(folder))
    for i in range(n):
        cache.put(f"k{i % 5}", PAYLOAD * (1 + i % 5))
    return n


def test_processes_filling_one_folder_at_once_leave_only_whole_entries(tmp_path: Path) -> None:
    with ProcessPoolExecutor(4) as pool:
        assert sum(pool.map(_fill, [str(tmp_path)] * 4, [200] * 4)) == 800
    fresh = Cache("cuda", tmp_path)
    assert all(fresh.get(f"k{j}") == PAYLOAD * (1 + j) for j in range(5))
    assert sorted(p.name for p in (tmp_path / "cuda").iterdir()) == [
        f"k{j}.bin" for j in range(5)]  # no temporary file left behind


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_an_unwritable_folder_degrades_to_memory_with_a_warning(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        cache = Cache("cuda", tmp_path)
        with pytest.warns(UserWarning, match="cannot be written"):
            cache.put("k1", PAYLOAD)
        assert cache.get("k1") == PAYLOAD
    finally:
        tmp_path.chmod(0o700)


def test_a_folder_that_is_a_file_degrades_to_memory_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "cuda").write_text("not a folder")
    cache = Cache("cuda", tmp_path)
    with pytest.warns(UserWarning, match="SAREK_CACHE_DIR"):
        cache.put("k1", PAYLOAD)
    assert cache.get("k1") == PAYLOAD


def test_keys_separate_their_parts() -> None:
    assert key("ab", "c") != key("a", "bc")
    assert key("text", "sm_90") == key("text", "sm_90")


def test_sarek_cache_dir_chooses_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setenv("SAREK_CACHE_DIR", str(tmp_path))
    assert Cache("cuda").folder == tmp_path / "cuda"


def _nvrtc_reason() -> str | None:
    from backends.cuda.nvrtc import nvrtc_available

    return nvrtc_available()


@pytest.mark.skipif(_nvrtc_reason() is not None, reason=f"no NVRTC: {_nvrtc_reason()}")
def test_a_new_process_takes_a_compiled_kernel_from_the_disk_without_nvrtc(
        tmp_path: Path) -> None:
    """The first process compiles with NVRTC; the second finds the cubin on disk (a hit, no
    miss), the same bytes."""
    script = textwrap.dedent("""
        import sys
        import sarek
        from backends.cuda.launch import CUBINS, cubin
        from sarek.loader import load_module
        launch = load_module(sys.argv[1]).make(70, 45, 33)
        from backends import registry
        from backends.pipeline import compile_launch
        done = compile_launch(registry.target("cuda"), launch)
        k, binary = cubin(done.text, done.lowered.name, "sm_90")
        print(CUBINS.hits, CUBINS.misses, len(binary), k)
    """)
    example = Path(__file__).resolve().parent.parent / "examples" / "gemm_f16.py"
    env = {**os.environ, "SAREK_CACHE_DIR": str(tmp_path)}

    def run() -> list[str]:
        done = subprocess.run([sys.executable, "-c", script, str(example)], env=env,
                              capture_output=True, text=True, check=True)
        return done.stdout.split()

    first, second = run(), run()
    assert first[:2] == ["0", "1"] and second[:2] == ["1", "0"]
    assert first[2:] == second[2:]
