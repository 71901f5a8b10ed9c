"""The strategy graph: one networkx DiGraph of the folded run (`of(state)`), the one answer
to every lineage question (an attempt's parent and ancestors, the branches a
prune takes with it, a branch's line).

Nodes are attempt numbers (int), branch ids (str) and START, the op's starting
candidate. Edges carry a `kind`:
  DERIVED  parent attempt (or START) -> the attempt made from it
  HOLDS    branch -> each of its attempts, in order
  OPENED   the attempt a branch was opened from (or START) -> the branch
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol

import networkx as nx


class Folded(Protocol):
    """What the graph is built from: the fold's attempts and branches (RunState), and the
    graph it keeps between questions."""

    attempts: Mapping[int, Any]  # attempt number -> its branch_id and parent
    branches: Mapping[str, Any]  # branch id -> its id and from_attempt
    lineage_cache: tuple[int, int, nx.DiGraph] | None


START = "<start>"  # the starting candidate (a run from own kernels has an attempt 0)
DERIVED, HOLDS, OPENED = "derived", "holds", "opened"


def of(state: Folded) -> nx.DiGraph:
    """The graph of the state's attempts and branches, built once for as many of them as
    the fold has (an attempt's parent and a branch's origin never change once folded)."""
    size = (len(state.attempts), len(state.branches))
    cached = state.lineage_cache
    if cached is not None and cached[:2] == size:
        return cached[2]
    g = nx.DiGraph()
    g.add_node(START)
    for b in state.branches.values():
        add_branch(g, b.id, b.from_attempt)
    for n in sorted(state.attempts):
        a = state.attempts[n]
        add_attempt(g, n, a.branch_id, a.parent)
    state.lineage_cache = (*size, g)
    return g


def add_branch(g: nx.DiGraph, branch_id: str, from_attempt: int | None) -> None:
    g.add_node(branch_id, opened=g.number_of_nodes())
    g.add_edge(START if from_attempt is None else from_attempt, branch_id, kind=OPENED)


def add_attempt(g: nx.DiGraph, attempt: int, branch_id: str, parent: int | None) -> None:
    g.add_node(attempt)
    g.add_edge(START if parent is None else parent, attempt, kind=DERIVED)
    if branch_id not in g:  # a log whose branch was never opened: hang it off the start
        add_branch(g, branch_id, None)
    g.add_edge(branch_id, attempt, kind=HOLDS)


def _along(g: nx.DiGraph, node: object, kind: str, forward: bool = True) -> list:
    edges = g.out_edges(node, data="kind") if forward else g.in_edges(node, data="kind")
    return [(v if forward else u) for u, v, k in edges if k == kind]


def parent(g: nx.DiGraph, attempt: int) -> int | None:
    """The attempt it was made from; None for the starting candidate (or an unknown one)."""
    if attempt not in g:
        return None
    found = _along(g, attempt, DERIVED, forward=False)
    return None if not found or found[0] == START else found[0]


def lineage(g: nx.DiGraph, attempt: int) -> list[int]:
    """The attempt, its parent, ... back to the first attempt made from the start."""
    out: list[int] = []
    node: int | None = attempt if attempt in g else None
    while node is not None and node not in out:
        out.append(node)
        node = parent(g, node)
    return out


def ancestors(g: nx.DiGraph, attempt: int) -> set[int]:
    """Every attempt it was (transitively) made from."""
    derived = nx.subgraph_view(g, filter_edge=lambda u, v: g.edges[u, v]["kind"] == DERIVED)
    return {n for n in nx.ancestors(derived, attempt) if n != START} if attempt in g else set()


def branch_attempts(g: nx.DiGraph, branch_id: str) -> list[int]:
    """A branch's attempts, in the order they were numbered (its line)."""
    return _along(g, branch_id, HOLDS) if branch_id in g else []


def opened_from(g: nx.DiGraph, branch_id: str) -> int | None:
    found = _along(g, branch_id, OPENED, forward=False) if branch_id in g else []
    return None if not found or found[0] == START else found[0]


def branches_opened_from(g: nx.DiGraph, attempt: int | None) -> list[str]:
    """The branches opened from an attempt (None: from the start), in the order opened."""
    node = START if attempt is None else attempt
    found = _along(g, node, OPENED) if node in g else []
    return sorted(found, key=lambda b: g.nodes[b]["opened"])


def subtree_branches(g: nx.DiGraph, branch_id: str) -> list[str]:
    """This branch and every branch opened (transitively) from its attempts: what a prune
    takes with it, breadth first, each level in the order the branches were opened."""
    out, queue = [branch_id], deque([branch_id])
    while queue:
        owned = branch_attempts(g, queue.popleft())
        children = sorted(
            {b for n in owned for b in _along(g, n, OPENED)}, key=lambda b: g.nodes[b]["opened"]
        )
        for b in children:
            if b not in out:
                out.append(b)
                queue.append(b)
    return out
