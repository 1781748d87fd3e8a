"""What a device check measured, written as JSON when the session asks for it: with
``SAREK_RECORD=DIR`` each check writes ``DIR/<name>.json`` (one file per measurement, named as
in ``bench/results``); without it nothing is written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

VARIABLE = "SAREK_RECORD"


def record(name: str, result: dict[str, Any]) -> Path | None:
    """``result`` as indented JSON in ``$SAREK_RECORD/<name>.json``; the path written, or None
    when the variable is unset."""
    folder = os.environ.get(VARIABLE)
    if not folder:
        return None
    path = Path(folder) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
