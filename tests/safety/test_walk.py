"""Walking nested containers without recursion: order, shared and cyclic containers, shortened deep names."""

from __future__ import annotations

import torch

from robo_safe_rl.safety.walk import NAME_PARTS, walk_tensors


def test_order_shared_and_cyclic_containers() -> None:
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    shared = [c]
    loop: list = [a]
    loop.append(loop)
    obj = {"x": [a, (b, {"y": c, "n": 3, "s": "text"})], "z": None, "again": shared, "same": shared, "l": loop}
    # The list reached twice through "again" and "same" is walked once; the cycle through "l" ends.
    assert [name for name, _ in walk_tensors(obj)] == ["x/0", "x/1/0", "x/1/1/y", "again/0", "l/0"]
    assert [name for name, _ in walk_tensors(a, "t")] == ["t"]


def test_deep_nesting_is_walked_without_recursion_and_named_short() -> None:
    # [[[...[t]...]]] 200,000 lists deep: recursion would stop near 1,000 levels. The path has 1 + 200,000
    # parts (key "w", then index 0 per level); the name keeps 24 at each end and counts the 199,953 between.
    deep: object = torch.ones(1)
    for _ in range(200_000):
        deep = [deep]
    ((name, tensor),) = walk_tensors({"w": deep})
    assert name == "/".join(["w", *["0"] * (NAME_PARTS - 1), "[199953 levels]", *["0"] * NAME_PARTS])
    assert tensor.item() == 1.0
