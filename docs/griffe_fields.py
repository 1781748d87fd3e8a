"""A griffe extension for the API reference: an unannotated class attribute of a pydantic model
(``__str__ = __repr__``) is not a field. griffe-pydantic's static analysis labels it one, with
no annotation, which its template cannot render; pydantic itself never makes it a field."""

from __future__ import annotations

from typing import Any

import griffe


class UnannotatedAreNotFields(griffe.Extension):
    """Runs after griffe_pydantic: drops the field label of attributes without annotation."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._walk(pkg, set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        for member in obj.members.values():
            if member.is_alias:
                continue
            if isinstance(member, griffe.Attribute) and member.annotation is None:
                member.labels.discard("pydantic-field")
            elif isinstance(member, griffe.Class | griffe.Module):
                self._walk(member, seen)
