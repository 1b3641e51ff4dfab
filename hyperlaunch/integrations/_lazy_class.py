"""A callback class made when its name is first used, not when its module is imported: the
framework it subclasses is imported then. The same class after (isinstance and subclassing hold)."""

from __future__ import annotations

from collections.abc import Callable


class LazyClass:
    def __init__(self, module: str, name: str, build: Callable[[], type]) -> None:
        self.module = module
        self.name = name
        self.build = build
        self.made: type | None = None

    def attribute(self, name: str) -> type:
        """The module's __getattr__: the class for its name, built once."""
        if name != self.name:
            raise AttributeError(f"module {self.module!r} has no attribute {name!r}")
        if self.made is None:
            self.made = self.build()
        return self.made
