"""Sequences read as asked: :class:`Lazily` makes item i when it is first indexed; :class:`LineTable` is
one whose items are the lines of a file, each found and checked through a fixed-width key (the snapshot's
and the version's shard tables: a loader rank parses the entries of the shards it opens).
"""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Lazily(Sequence[T], Generic[T]):
    """``n`` items, item i made by ``make(i)`` when first asked and kept (``_made``)."""

    def __init__(self, n: int, make: Callable[[int], T]) -> None:
        self.n, self.make = n, make
        self._made: dict[int, T] = {}

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(f"item {i} of {self.n}")
        i %= self.n
        if i not in self._made:
            self._made[i] = self.make(i)
        return self._made[i]


class LineTable(Lazily[T]):
    """``n`` items, item i the line of ``lines`` that its key places (:meth:`where`: offset, length and
    the line's sha256), checked against that digest and parsed (:meth:`parse`) when first indexed;
    iteration reads the file once."""

    def __init__(self, lines: Path, n: int) -> None:
        super().__init__(n, self._read)
        self.lines = Path(lines)

    @abstractmethod
    def where(self, i: int) -> tuple[int, int, bytes]: ...

    @abstractmethod
    def parse(self, line: bytes) -> T: ...

    def _checked(self, i: int, line: bytes) -> T:
        if hashlib.sha256(line).digest() != self.where(i)[2]:
            raise ValueError(f"{self.lines}: shard {i}'s line does not match its key")
        self._made[i] = self.parse(line)
        return self._made[i]

    def _read(self, i: int) -> T:
        offset, length, _ = self.where(i)
        with open(self.lines, "rb") as f:
            f.seek(offset)
            return self._checked(i, f.read(length))

    def __iter__(self) -> Iterator[T]:
        with open(self.lines, "rb") as f:
            for i in range(self.n):
                line = f.readline()
                yield self._made[i] if i in self._made else self._checked(i, line)
