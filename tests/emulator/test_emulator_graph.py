"""The dependency graph: levels, cycles, delete order, subgraphs."""

from __future__ import annotations

import pytest

from crhelper.emulator.graph import DependencyGraph


def diamond() -> DependencyGraph:
    return DependencyGraph({"A": [], "B": ["A"], "C": ["A"], "D": ["B", "C"], "E": []})


def test_levels_group_independent_nodes() -> None:
    assert diamond().levels() == [["A", "E"], ["B", "C"], ["D"]]
    assert diamond().order() == ["A", "E", "B", "C", "D"]


def test_reverse_for_delete() -> None:
    assert diamond().reversed().levels() == [["D", "E"], ["B", "C"], ["A"]]


def test_ready_sets() -> None:
    graph = diamond()
    assert graph.ready(set(), set()) == ["A", "E"]
    assert graph.ready({"A"}, {"A", "E"}) == ["B", "C"]
    assert graph.ready({"A", "B"}, {"A", "B", "C", "E"}) == []


def test_cycles_are_named() -> None:
    graph = DependencyGraph({"A": ["B"], "B": ["C"], "C": ["A"], "D": []})
    assert graph.find_cycle() == ["A", "B", "C", "A"]
    with pytest.raises(ValueError, match=r"cycle: A -> B -> C -> A"):
        graph.levels()
    assert diamond().find_cycle() is None


def test_self_and_unknown_edges_are_dropped() -> None:
    graph = DependencyGraph({"A": ["A", "Ghost"]})
    assert graph.dependencies("A") == frozenset()


def test_subgraph_keeps_order_through_removed_nodes() -> None:
    sub = diamond().subgraph(["A", "D"])
    assert sub.dependencies("D") == frozenset({"A"})
    assert sub.levels() == [["A"], ["D"]]
