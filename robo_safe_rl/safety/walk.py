"""Walk nested containers for their tensors without recursion, naming each by its path through them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

NAME_PARTS = 24
"""Path components a tensor's name keeps at each end; a deeper path shows how many levels it leaves out in the
middle (``a/b/.../[999952 levels]/.../y/z``). Names stay short, and walking a structure nested a million levels deep
stays linear: no level copies the path above it."""


def walk_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Yield every tensor inside nested dicts, lists and tuples, with its path.

    Keys and list indices are joined with ``/``; values that are neither tensors nor containers (numbers, strings,
    ``None``) are skipped. A container reached twice (shared or cyclic references) is walked once. The walk keeps
    its own stack, so any nesting depth is fine; paths deeper than ``2 * NAME_PARTS`` are shortened in the middle.

    Args:
        obj: A tensor or a nesting of dicts, lists and tuples holding tensors.
        prefix: Path of ``obj`` itself; empty at the top.

    Yields:
        ``(name, tensor)`` pairs in the container's order.
    """
    return walk_leaves(obj, lambda item: item if isinstance(item, torch.Tensor) else None, prefix)


def walk_leaves(obj: Any, leaf: Callable[[Any], Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(path, leaf(item))`` for every item of a nesting of dicts, lists, tuples and sets for which ``leaf``
    returns something other than ``None``, in container order (see :func:`walk_tensors`)."""
    seen: set[int] = set()
    start = (prefix,) if prefix else ()
    # Each entry: the path's first NAME_PARTS components, the deeper ones as a linked list (part, parent) so that
    # a level costs O(1) however deep it is, the depth, and the item.
    stack: list[tuple[tuple[str, ...], Any, int, Any]] = [(start, None, len(start), obj)]
    while stack:
        head, tail, depth, item = stack.pop()
        value = leaf(item)
        if value is not None:
            yield _join(head, tail, depth), value
            continue
        if isinstance(item, dict):
            children: list[tuple[Any, Any]] = list(item.items())
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = list(enumerate(item))
        else:
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        depth += 1
        children.reverse()
        if depth > NAME_PARTS:
            for key, child in children:
                stack.append((head, (str(key), tail), depth, child))
        else:
            for key, child in children:
                stack.append(((*head, str(key)), None, depth, child))


def _join(head: tuple[str, ...], tail: Any, depth: int) -> str:
    last: list[str] = []
    while tail is not None and len(last) < NAME_PARTS:
        part, tail = tail
        last.append(part)
    last.reverse()
    left_out = depth - len(head) - len(last)
    return "/".join((*head, f"[{left_out} levels]", *last) if left_out > 0 else (*head, *last))
