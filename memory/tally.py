"""Result dataclasses whose counts add up across batches, pages or streams."""
from __future__ import annotations

import operator
from dataclasses import fields
from typing import Any, ClassVar, Self


class Tally:
    """Mixin for a dataclass of counts (and lists) that ``add`` sums field by field."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    def add(self, other: Self) -> None:
        """Add ``other``'s fields into this one: numbers sum, lists are extended in place."""
        for f in fields(self):
            setattr(self, f.name, operator.iadd(getattr(self, f.name), getattr(other, f.name)))
