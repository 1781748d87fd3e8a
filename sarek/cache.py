"""A cache of compiled kernels: in memory, and on disk across processes.

Entries are bytes (a cubin) under a key the caller derives from everything that decides them
(the printed text, the architecture, the compiler's version, the options): ``key(...)`` hashes
the parts. On disk an entry is one file, ``<key>.bin``, holding a SHA-256 of its payload and
the payload; a read that finds a truncated or altered file (the hash disagrees) drops it and
reports a miss, so the caller compiles again and rewrites it. Writes go to a temporary file in
the same folder and are renamed into place, so that processes filling the cache at once never
leave a half-written entry. A folder that cannot be created or written degrades to the
in-memory cache with one warning. One lock guards the memory side: threads may share a cache.

The folder is ``$SAREK_CACHE_DIR`` when set, else the user cache folder ``platformdirs``
gives for ``sarek`` (``~/.cache/sarek`` on Linux), with one sub-folder per kind of entry.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

_DIGEST = 32  # bytes of SHA-256 at the head of each entry


def key(*parts: str | bytes) -> str:
    """A hex key for the parts, in order (each length-prefixed, so no two lists collide)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def default_folder() -> Path:
    """``$SAREK_CACHE_DIR``, else the platform's user cache folder for sarek."""
    chosen = os.environ.get("SAREK_CACHE_DIR")
    if chosen:
        return Path(chosen)
    import platformdirs

    return Path(platformdirs.user_cache_dir("sarek", appauthor=False))


class Cache:
    """Entries of one kind (``kind`` names the sub-folder: ``cuda``, ...)."""

    def __init__(self, kind: str, folder: Path | None = None) -> None:
        self.kind = kind
        self._folder = folder
        self._memory: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._disk_ok: bool | None = None  # decided on first use
        self.hits = self.misses = 0

    @property
    def folder(self) -> Path:
        return (self._folder or default_folder()) / self.kind

    def _disk(self) -> Path | None:
        """The entries' folder, made on first use; None (with one warning) when it cannot be
        made or written."""
        if self._disk_ok is False:
            return None
        folder = self.folder
        if self._disk_ok is None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
                    pass
                self._disk_ok = True
            except OSError as e:
                self._disk_ok = False
                warnings.warn(f"sarek: the kernel cache folder {folder} cannot be written "
                              f"({e.strerror or e}); compiled kernels are kept in memory only "
                              "(set SAREK_CACHE_DIR to a writable folder)", stacklevel=3)
                return None
        return folder

    def get(self, k: str) -> bytes | None:
        """The entry under ``k``, from memory or disk; None when absent or damaged (a damaged
        file is removed)."""
        with self._lock:
            if k in self._memory:
                self.hits += 1
                return self._memory[k]
        folder = self._disk()
        if folder is not None:
            path = folder / f"{k}.bin"
            try:
                raw = path.read_bytes()
            except OSError:
                raw = None
            if raw is not None:
                digest, payload = raw[:_DIGEST], raw[_DIGEST:]
                if len(raw) > _DIGEST and hashlib.sha256(payload).digest() == digest:
                    with self._lock:
                        self._memory[k] = payload
                        self.hits += 1
                    return payload
                path.unlink(missing_ok=True)  # truncated or altered: rebuilt by the caller
        with self._lock:
            self.misses += 1
        return None

    def put(self, k: str, payload: bytes) -> None:
        """Stores ``payload`` under ``k`` in memory and, where it can, on disk (atomically)."""
        with self._lock:
            self._memory[k] = payload
        folder = self._disk()
        if folder is None:
            return
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{k[:16]}-", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, folder / f"{k}.bin")
        except OSError as e:
            warnings.warn(f"sarek: could not write to the kernel cache {folder} "
                          f"({e.strerror or e}); this entry stays in memory", stacklevel=2)

    def get_or_make(self, k: str, make: Callable[[], bytes]) -> bytes:
        """The entry under ``k``, made by ``make`` and stored when absent."""
        found = self.get(k)
        if found is not None:
            return found
        made = make()
        self.put(k, made)
        return made

    def forget_memory(self) -> None:
        """Drops the in-memory entries (the disk keeps its own): what a new process sees."""
        with self._lock:
            self._memory.clear()
