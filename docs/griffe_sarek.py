"""griffe extensions for the API reference, loaded by mkdocstrings (``mkdocs.yml``).

* ``UnannotatedAreNotFields``: an unannotated class attribute of a pydantic model
  (``__str__ = __repr__``) is not a field. griffe-pydantic's static analysis labels it one,
  with no annotation, which its template cannot render; pydantic itself never makes it a field.
* ``EnumMembers``: the members of an enum (``ElemType.F32 = "f32"``) have no docstrings, so the
  reference would not show them; each enum's docstring gets a table of its members, their
  values and the comment beside each in the source.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import griffe

ENUM_BASES = {"Enum", "StrEnum", "IntEnum", "enum.Enum", "enum.StrEnum", "enum.IntEnum"}
_COMMENT = re.compile(r"#\s*(.*)$")


def _objects(obj: griffe.Object, seen: set[str]) -> Iterator[griffe.Object]:
    """``obj`` and every class and module inside it, aliases left out."""
    if obj.path in seen:
        return
    seen.add(obj.path)
    yield obj
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, griffe.Class | griffe.Module):
            yield from _objects(member, seen)


class UnannotatedAreNotFields(griffe.Extension):
    """Runs after griffe_pydantic: drops the field label of attributes without annotation."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _objects(pkg, set()):
            for member in obj.members.values():
                if (not member.is_alias and isinstance(member, griffe.Attribute)
                        and member.annotation is None):
                    member.labels.discard("pydantic-field")


class EnumMembers(griffe.Extension):
    """Adds the table of its members to each enum's docstring."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _objects(pkg, set()):
            if isinstance(obj, griffe.Class) and {str(b) for b in obj.bases} & ENUM_BASES:
                table = self._table(obj)
                if table:
                    text = obj.docstring.value if obj.docstring else ""
                    obj.docstring = griffe.Docstring(f"{text}\n\n{table}".strip(),
                                                     parent=obj)

    @staticmethod
    def _table(cls: griffe.Class) -> str:
        rows = []
        for member in cls.members.values():
            if (member.is_alias or not isinstance(member, griffe.Attribute)
                    or member.name.startswith("_") or member.value is None):
                continue
            found = _COMMENT.search(member.source) if member.source else None
            note = found.group(1).replace("|", "\\|") if found else ""
            rows.append(f"| `{member.name}` | `{member.value}` | {note} |")
        return "\n".join(["| member | value | |", "| --- | --- | --- |", *rows]) if rows else ""
