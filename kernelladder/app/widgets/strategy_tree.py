"""The strategy graph as a tree: branches (nested under the attempt they were opened
from) and their attempts, each with its verdict mark and speedup.

Updated incrementally: a batch adds the new nodes and relabels only what changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from kernelladder.app import format as fmt
from kernelladder.app import view as v
from kernelladder.engine import AttemptStatus, BranchStatus
from kernelladder.verifier.contract.verdict import BEATS_EVERY_BASELINE

# after an attempt's speedup: faster than every library baseline at every shape
BEATS_MARK = "▲"
# where a move says which attempt it was made from ("EPT 16->32 (from #13)", "family a ->
# b from #2: ..."): shown right after the verdict, so a narrow pane cuts the move, not it
_FROM = re.compile(r"\s*\(from #(\d+)\)|\s+from #(\d+)(?=:)")


def lineage(move: str) -> tuple[str, str]:
    """(" from #13", the move without it), or ("", move)."""
    m = _FROM.search(move)
    if m is None:
        return "", move
    return f" from #{m.group(1) or m.group(2)}", (move[: m.start()] + move[m.end() :]).strip()


@dataclass(frozen=True)
class NodeRef:
    branch_id: str
    attempt: int | None = None  # None: the branch node itself


def branch_look(b: v.BranchView) -> str:
    """The state a branch's label is styled as: a running branch of a paused run looks
    paused."""
    return BranchStatus.PAUSED if b.waits_with_run else b.state


# Tree labels are Rich Text: their styles come from component classes, styled in CSS
# with theme variables.
BRANCH_STYLES = {
    BranchStatus.RUNNING: "running",
    BranchStatus.PAUSED: "paused",
    BranchStatus.WAITING_GATE: "gated",
    BranchStatus.EXHAUSTED: "muted",
    BranchStatus.PRUNED: "pruned",
    BranchStatus.STOPPED: "muted",
}
VERDICT_STYLES = {"pass": "pass", "fail": "fail", "crash": "crash", "timeout": "fail"}
_MARK_PARTS = {"▲": "pass", "=": "gated", "▼": "fail", "?": "muted"}  # per-shape standing
PARTS = (
    "pass",
    "fail",
    "crash",
    "gated",
    "muted",
    "pruned",
    "running",
    "paused",
    "strategy",
    "best",
    "id",
)


class StrategyTree(Tree[NodeRef]):
    COMPONENT_CLASSES = Tree.COMPONENT_CLASSES | {f"strategy-tree--{p}" for p in PARTS}
    DEFAULT_CSS = """
    StrategyTree {
        background: $surface;
        scrollbar-size-vertical: 1;
    }
    StrategyTree > .strategy-tree--pass { color: $success; }
    StrategyTree > .strategy-tree--fail { color: $error; }
    StrategyTree > .strategy-tree--crash { color: $error; text-style: bold; }
    StrategyTree > .strategy-tree--gated { color: $warning; text-style: bold; }
    StrategyTree > .strategy-tree--muted { color: $foreground-muted; }
    StrategyTree > .strategy-tree--pruned { color: $foreground-muted; text-style: strike; }
    StrategyTree > .strategy-tree--running { color: $success; }
    StrategyTree > .strategy-tree--paused { color: $warning; }
    StrategyTree > .strategy-tree--strategy { color: $primary; }
    StrategyTree > .strategy-tree--best { color: $accent; text-style: bold; }
    StrategyTree > .strategy-tree--id { text-style: bold; }
    """

    class Selected(Message):
        """The highlighted branch / attempt changed."""

        def __init__(self, branch_id: str, attempt: int | None) -> None:
            super().__init__()
            self.branch_id = branch_id
            self.attempt = attempt

    def __init__(self, **kwargs) -> None:
        super().__init__("run", **kwargs)
        self.show_root = False
        self.guide_depth = 3
        self._branch_nodes: dict[str, TreeNode[NodeRef]] = {}
        self._attempt_nodes: dict[int, TreeNode[NodeRef]] = {}
        self._branch_seen: dict[str, v.BranchView] = {}
        self._attempt_seen: dict[int, v.AttemptView] = {}
        self._speed_measured = False
        # keep the newest attempt highlighted until the person moves the cursor: only
        # their keys and clicks turn it off (a highlight event of the code's own moves,
        # arriving after the next move, once read as the person's and stopped following)
        self.follow = True
        self._styles: dict[str, Style] | None = None  # component styles, per theme
        # `/`: only the attempts whose line holds this text (and the branches holding
        # them, or whose own line holds it); "" shows everything
        self.filter_text = ""
        self._shown: tuple[frozenset[str], frozenset[int]] | None = None

    # --- filter ----------------------------------------------------------------------

    def set_filter(self, text: str, view: v.RunView) -> None:
        text = text.strip().lower()
        if text == self.filter_text:
            return
        self.filter_text = text
        self.reset()
        self.show(view)

    def _filtered(self, view: v.RunView) -> tuple[frozenset[str], frozenset[int]]:
        """The branches and attempts the filter lets through."""
        text = self.filter_text
        attempts: set[int] = set()
        branches: set[str] = set()
        for b in view.branches:
            label = self._branch_label(
                b, view.attempts.get(-1 if b.best_attempt is None else b.best_attempt)
            )
            whole = text in label.plain.lower()
            for n in b.attempts:
                a = view.attempts.get(n)
                if a is not None and (whole or text in self._attempt_label(a).plain.lower()):
                    attempts.add(n)
            if whole or any(n in attempts for n in b.attempts):
                branches.add(b.branch_id)
        return frozenset(branches), frozenset(attempts)

    # --- updates ---------------------------------------------------------------------

    def show(self, view: v.RunView) -> None:
        self._speed_measured = view.speed_measured
        shown = self._filtered(view) if self.filter_text else None
        if shown is not None and self._shown is not None and shown != self._shown:
            self.reset()  # what matches changed (a verdict came): lay the tree out again
        self._shown = shown
        newest: int | None = None
        for branch in view.branches:
            if shown is not None and branch.branch_id not in shown[0]:
                continue
            node = self._branch_nodes.get(branch.branch_id)
            if node is None:
                parent = self._attempt_nodes.get(
                    -1 if branch.from_attempt is None else branch.from_attempt, self.root
                )
                node = parent.add(
                    self._branch_label(
                        branch,
                        view.attempts.get(
                            -1 if branch.best_attempt is None else branch.best_attempt
                        ),
                    ),
                    data=NodeRef(branch.branch_id),
                    expand=True,
                )
                self._branch_nodes[branch.branch_id] = node
                self._branch_seen[branch.branch_id] = branch
            elif self._branch_seen[branch.branch_id] != branch:
                node.set_label(
                    self._branch_label(
                        branch,
                        view.attempts.get(
                            -1 if branch.best_attempt is None else branch.best_attempt
                        ),
                    )
                )
                self._branch_seen[branch.branch_id] = branch
            for n in branch.attempts:
                attempt = view.attempts.get(n)
                if attempt is None or (shown is not None and n not in shown[1]):
                    continue
                leaf = self._attempt_nodes.get(n)
                if leaf is None:
                    leaf = node.add(
                        self._attempt_label(attempt),
                        data=NodeRef(branch.branch_id, n),
                        allow_expand=False,
                        expand=True,
                    )
                    self._attempt_nodes[n] = leaf
                    self._attempt_seen[n] = attempt
                    newest = n if newest is None else max(newest, n)
                elif self._attempt_seen[n] != attempt:
                    leaf.set_label(self._attempt_label(attempt))
                    self._attempt_seen[n] = attempt
        if self.follow and newest is not None:
            self._move_to(self._attempt_nodes[newest])
        elif self.cursor_node is None and self._branch_nodes:
            self._move_to(next(iter(self._branch_nodes.values())))

    def on_resize(self, event: events.Resize) -> None:
        self._invalidate()  # labels are cut to the width: lay the lines out again
        # the selected attempt stays in view when the pane shrinks (the app's first
        # layouts, a smaller terminal)
        self.call_after_refresh(self._cursor_into_view)

    def reset(self) -> None:
        """Forget every node (a replay stepped back)."""
        self.clear()
        self._branch_nodes.clear()
        self._attempt_nodes.clear()
        self._branch_seen.clear()
        self._attempt_seen.clear()

    def select_attempt(self, attempt: int) -> bool:
        node = self._attempt_nodes.get(attempt)
        if node is None:
            return False
        self._move_to(node)
        return True

    def _move_to(self, node: TreeNode[NodeRef]) -> None:
        _ = self.last_line  # lays out the lines, so a node added just now has its line
        self.move_cursor(node, animate=False)
        # the scroll above is clamped to the tree's height as last laid out: with lines
        # added just now (a replay's end, a new attempt at the bottom) the cursor could
        # stay below the pane; scroll again once the new height is known (and on_resize)
        self.call_after_refresh(self._cursor_into_view)

    def _cursor_into_view(self) -> None:
        if self.cursor_node is not None:
            self.scroll_to_node(self.cursor_node, animate=False)

    # --- labels ----------------------------------------------------------------------

    def render_label(self, node: TreeNode[NodeRef], base_style: Style, style: Style) -> Text:
        """The label cut with an ellipsis at the pane's edge (the tree cropped it
        mid-word: 'exhausted: stagnati')."""
        text = super().render_label(node, base_style, style)
        depth, parent = 0, node.parent
        while parent is not None and parent is not self.root:
            depth, parent = depth + 1, parent.parent
        room = self.scrollable_content_region.width - depth * self.guide_depth
        if room > 0 and text.cell_len > room:
            text.truncate(room, overflow="ellipsis")
        return text

    def _style(self, part: str) -> Style:
        if not part:
            return Style()
        styles = self._styles
        if styles is None:
            styles = self._styles = {
                p: self.get_component_rich_style(f"strategy-tree--{p}", partial=True) for p in PARTS
            }
        return styles[part]

    def _text(self, *parts: tuple[str, str] | str) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        for part in parts:
            if isinstance(part, str):
                text.append(part)
            else:
                text.append(part[0], self._style(part[1]))
        return text

    def _branch_label(self, b: v.BranchView, best_view: v.AttemptView | None = None) -> Text:
        best = ""
        if best_view is not None and best_view.vs_best is not None:
            best = f"  best #{b.best_attempt} {best_view.vs_best:.2f}× vs best"
        elif b.best_attempt is not None:
            best = f"  best #{b.best_attempt} " + (
                fmt.speedup(b.best_speedup) if self._speed_measured else "(pass)"
            )
        if best and best_view is not None and best_view.standing == BEATS_EVERY_BASELINE:
            best += f" {BEATS_MARK}"
        origin = f" from #{b.from_attempt}" if b.from_attempt is not None else ""
        return self._text(
            ("★ ", "best") if b.is_best else "",
            (b.branch_id, "id"),
            " ",
            (b.strategy, "strategy"),
            (origin, "muted"),
            "  ",
            (fmt.branch_status(b), BRANCH_STYLES.get(branch_look(b), "")),
            (best, "pass"),
        )

    def _attempt_label(self, a: v.AttemptView) -> Text:
        mark = fmt.attempt_mark(a)
        if a.state == AttemptStatus.JUDGED:
            style = VERDICT_STYLES.get(a.verdict_kind or "", "fail")
        elif a.state == AttemptStatus.GATED:
            style = "gated"
        else:
            style = "muted"
        result = fmt.attempt_result(a, self._speed_measured)
        origin, move = lineage(a.move)
        if a.passed and a.early_stop is not None:
            # why it is not its branch's best, though its marks may read better: its
            # timing stopped early (coarse times), not faster than that attempt
            origin += f" coarse, ≤#{a.early_stop}"
        marks = fmt.standing_marks(a) if a.passed else ""
        if marks:  # one mark per shape against the fastest baseline, the reference second
            over = f" {fmt.speedup(a.speedup)} ref" if a.speedup is not None else ""
            return self._text(
                (f"{mark} ", style),
                (f"#{a.number}", "id"),
                " ",
                (result, style),
                (origin, "muted"),
                " ",
                *[(m, _MARK_PARTS[m]) for m in marks],
                (over, "muted"),
                "  ",
                (move, "muted"),
            )
        # faster than the fastest library baseline at every shape of the suite
        beats = a.standing == BEATS_EVERY_BASELINE
        return self._text(
            (f"{mark} ", style),
            (f"#{a.number}", "id"),
            " ",
            (result, style),
            (f" {BEATS_MARK}", "best") if beats else "",
            (origin, "muted"),
            "  ",
            (move, "muted"),
        )

    def notify_style_update(self) -> None:
        super().notify_style_update()
        # The component styles settle after this call: look at them once they have.
        self.call_after_refresh(self._restyle)

    def _restyle(self) -> None:
        before, self._styles = self._styles, None
        if before is None or before == {p: self._style(p) for p in PARTS}:
            return
        # A new theme: labels hold resolved styles, so draw them again.
        for branch_id, node in self._branch_nodes.items():
            b = self._branch_seen[branch_id]
            node.set_label(
                self._branch_label(
                    b, self._attempt_seen.get(-1 if b.best_attempt is None else b.best_attempt)
                )
            )
        for n, node in self._attempt_nodes.items():
            node.set_label(self._attempt_label(self._attempt_seen[n]))

    # --- selection -------------------------------------------------------------------

    def _person_moves(self) -> None:
        """The person moved the cursor (a click, or one of PERSON_MOVES' keys)."""
        self.follow = False

    def on_click(self, event: events.Click) -> None:
        self._person_moves()  # Tree's own click handler (called as well) moves the cursor

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[NodeRef]) -> None:
        event.stop()
        ref = event.node.data
        if ref is None:
            return
        self.post_message(self.Selected(ref.branch_id, ref.attempt))


# The Tree's cursor actions (its keys): a person moving the cursor stops following the
# newest attempt, then the Tree moves it.
PERSON_MOVES = (
    "cursor_up",
    "cursor_down",
    "page_up",
    "page_down",
    "scroll_home",
    "scroll_end",
    "cursor_parent",
    "cursor_parent_next_sibling",
    "cursor_previous_sibling",
    "cursor_next_sibling",
)


def _moved_by_person(name: str) -> Callable[[StrategyTree], None]:
    tree_action = getattr(Tree, f"action_{name}")

    def action(self: StrategyTree) -> None:
        self._person_moves()
        tree_action(self)

    action.__name__ = f"action_{name}"
    action.__qualname__ = f"StrategyTree.action_{name}"
    return action


for _name in PERSON_MOVES:
    setattr(StrategyTree, f"action_{_name}", _moved_by_person(_name))
