"""The strategy graph as a networkx DiGraph, built from the folded state.

Nodes are attempt numbers (attributes: branch, strategy, move, source_hash, status,
verdict, gate, speedup, floor_fraction, undo_cost); node 0 stands for the op's starting
candidate when some attempt starts from it. Edges point parent -> child. A branch is a
lineage with a strategy label: `lineage(graph, n)` walks back to the root.
"""

from __future__ import annotations

import networkx as nx

from kernelladder.engine.record.state import RunState

START = 0  # the starting candidate


def build_graph(state: RunState) -> nx.DiGraph:
    g = nx.DiGraph()
    for n, a in state.attempts.items():
        g.add_node(
            n,
            branch=a.branch_id,
            strategy=a.strategy,
            move=a.move,
            source_hash=a.source_hash,
            status=a.status,
            verdict=a.verdict,
            gate=a.failed_gate,
            speedup=a.speedup,
            floor_fraction=a.floor_fraction,
            undo_cost=a.undo_cost,
        )
    for n, a in state.attempts.items():
        parent = START if a.parent is None else a.parent
        if parent == START and START not in g:
            g.add_node(START, branch=None, strategy="start", move="starting candidate")
        g.add_edge(parent, n)
    return g


def lineage(graph: nx.DiGraph, attempt: int) -> list[int]:
    """attempt, its parent, ... back to the root (the starting candidate last)."""
    out = [attempt]
    seen = {attempt}
    node = attempt
    while True:
        parents = list(graph.predecessors(node))
        if not parents or parents[0] in seen:
            return out
        node = parents[0]
        seen.add(node)
        out.append(node)


def branch_subgraph(graph: nx.DiGraph, branch_id: str) -> nx.DiGraph:
    return graph.subgraph([n for n, d in graph.nodes(data=True) if d.get("branch") == branch_id])
