"""The main screen: the run's header, strategy tree, chart, attempt panel, gates and
footer, the selection, which actions apply now, and the replay, export and deploy
actions (its steering is mixed in: SteeringActions). What only the app can do
(send a command to the engine, move the replay) the screen asks for with a message
(app/messages.py); the app owns the event source and the fold."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input, Label, Tree

from kernelladder.app import view as v
from kernelladder.app.actions import (
    REPLAY_ACTIONS,
    SECTIONS,
    STEERING_ACTIONS,
    footer_drop_order,
    navigation_bindings,
    screen_bindings,
)
from kernelladder.app.deploys import DeployBoard
from kernelladder.app.folding import AttemptLogs
from kernelladder.app.messages import (
    DeployRequested,
    ReplaySeekRequested,
    ReplaySpeedRequested,
    ReplayToggled,
)
from kernelladder.app.modals.help_screen import HelpScreen
from kernelladder.app.modals.input_prompt import InputPrompt
from kernelladder.app.prompt_checks import export_path_error
from kernelladder.app.run_files import RunFiles
from kernelladder.app.screens.steering import DECIDE, OPEN, SteeringActions
from kernelladder.app.widgets.attempt_panel import AttemptPanel
from kernelladder.app.widgets.branch_trends import BranchTrends
from kernelladder.app.widgets.gates_panel import GatesPanel
from kernelladder.app.widgets.key_footer import KeyFooter
from kernelladder.app.widgets.replay_bar import ReplayBar
from kernelladder.app.widgets.run_header import RunHeader
from kernelladder.app.widgets.speedup_chart import SpeedupChart
from kernelladder.app.widgets.strategy_tree import StrategyTree
from kernelladder.app.widgets.tree_filter import TreeFilter

FOOTER_DROP_ORDER = footer_drop_order()
NARROW_BELOW = 80  # columns: the graph and the attempt share the width (the stylesheet)
# priority keys a focused filter must still receive as text
TYPED_OVER = frozenset(("replay_end", "replay_start"))


class MainScreen(SteeringActions, Screen):
    BINDINGS = screen_bindings()  # app/actions.py: every action declared once

    def __init__(
        self,
        *,
        replay: bool,
        files: RunFiles,
        logs: AttemptLogs,
        clock: Callable[[], float],
        starting: str = "",
        attached: str = "",
        deploys: DeployBoard | None = None,
    ) -> None:
        super().__init__()
        self.deploys = deploys if deploys is not None else DeployBoard()
        self.replay = replay
        self.attached = attached  # "pid 4242 on gpu-box": another process owns the run
        self.starting = starting  # the header's line until the run's first event
        self.files = files
        self.logs = logs
        self.clock = clock
        self.view: v.RunView = v.EMPTY_VIEW
        self.selected_branch: str | None = None
        self.selected_attempt: int | None = None
        self._before_seq: int | None = None
        self._bindings_key: tuple | None = None
        # the gates the last notification named as waiting (app.show_held_notes): what
        # a, v, g and enter act on when the selection is no gated attempt
        self.named_gates: tuple[str, ...] = ()

    def set_attached(self, owner: str) -> None:
        """Another process owns the run now (a new session of it): the header says so."""
        self.attached = owner
        if self.is_mounted:
            self.query_one(RunHeader).set_attached(owner)

    # --- layout ----------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield RunHeader(
            clock=self.clock,
            replay=self.replay,
            starting=self.starting,
            attached=self.attached,
            id="run-header",
        )
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield Label("strategy graph", id="strategy-title")
                yield StrategyTree(id="strategy-tree")
                yield BranchTrends(id="branch-trends")
            with Vertical(id="right"):
                yield SpeedupChart(id="speedup-chart")
                yield Label("selected attempt", id="attempt-title")
                yield AttemptPanel(self.files, self.logs, self.deploys, id="attempt-panel")
        read_only = bool(getattr(self.app, "read_only", False))
        yield GatesPanel(clock=self.clock, replay=self.replay, read_only=read_only, id="gates")
        if self.replay:
            yield ReplayBar(id="replay-bar")
        yield KeyFooter(compact=True, drop_order=FOOTER_DROP_ORDER)

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < NARROW_BELOW, "-narrow")
        # toasts stack under the header and stop above the footer (at 40x12 three of
        # them ran over it, Quit with it); more than fit scroll
        for rack in self.query("#textual-toastrack"):
            rack.styles.max_height = max(3, event.size.height - 3)

    def on_screen_suspend(self) -> None:
        self.kl_app.hold_visible_notes()  # a dialog opens: no toast draws over it

    def on_screen_resume(self) -> None:
        self.kl_app.show_held_notes()  # the run's notices that waited for a dialog to close

    def on_mount(self) -> None:
        self.query_one(StrategyTree).focus()
        if self.kl_app.bridge is not None and self.kl_app.fold.folded:
            self.show(self.kl_app.live_view())  # a resumed run's first frame
        # The footer fills itself on a bindings refresh it was there to hear.
        self.call_after_refresh(self.refresh_bindings)

    # --- updates ---------------------------------------------------------------------

    def show(
        self,
        view: v.RunView,
        *,
        before_seq: int | None = None,
        rewind: bool = False,
        immediate: bool = False,
    ) -> None:
        """Bring every widget up to `view` (one call per batch or replay step)."""
        self.view = view
        self._before_seq = before_seq
        self.query_one(RunHeader).show(view)
        tree = self.query_one(StrategyTree)
        trends = self.query_one(BranchTrends)
        if rewind:
            tree.reset()
            trends.reset()
        tree.show(view)
        trends.show(view)
        self.query_one(GatesPanel).show(view)
        self.query_one(SpeedupChart).show(view, immediate=immediate or rewind)
        if self.selected_attempt is not None and self.selected_attempt not in view.attempts:
            self.selected_attempt = None
        if self.selected_branch is not None and view.branch(self.selected_branch) is None:
            self.selected_branch = None
        self._show_attempt(rewind=rewind)
        self.bindings_may_change()

    def bindings_may_change(self) -> None:
        """Refresh the footer only when what check_action depends on changed: a footer
        refresh rebuilds its keys, far too costly to do for every batch."""
        decides, opens = self.gate_in_question(DECIDE)[0], self.gate_in_question(OPEN)[0]
        branch = self.view.branch(self.selected_branch)
        key = (
            self.view.state,
            self.kl_app.run_over,
            decides and decides.gate_id,
            opens and opens.gate_id,
            branch and (branch.branch_id, branch.paused, branch.state),
            self.attempts_left(),
        )
        if key != self._bindings_key:
            self._bindings_key = key
            self.refresh_bindings()

    def _show_attempt(self, *, rewind: bool = False) -> None:
        self.query_one(AttemptPanel).show(
            self.view, self.selected_attempt, before_seq=self._before_seq, rewind=rewind
        )
        title = "selected attempt"
        a = self.view.attempts.get(-1 if self.selected_attempt is None else self.selected_attempt)
        if a is not None:
            title = f"attempt #{a.number} · branch {a.branch_id} · {a.strategy}"
        elif self.selected_branch:
            title = f"branch {self.selected_branch}: no attempt yet"
        self.query_one("#attempt-title", Label).update(title)

    @on(StrategyTree.Selected)
    def _selected(self, event: StrategyTree.Selected) -> None:
        self.selected_branch = event.branch_id
        if event.attempt is not None:
            self.selected_attempt = event.attempt
        else:
            branch = self.view.branch(event.branch_id)
            self.selected_attempt = branch.attempts[-1] if branch and branch.attempts else None
        self._show_attempt()
        self.bindings_may_change()

    @on(Tree.NodeSelected, "#strategy-tree")
    def _tree_line_opened(self, event: Tree.NodeSelected) -> None:
        """enter on an attempt's line: its gate's prompt (enter on a branch folds it)."""
        ref = event.node.data
        if ref is not None and ref.attempt is not None:
            self.action_open_gate()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self.bindings_may_change()  # the gates table's row or the tree's line is what keys act on

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        self.bindings_may_change()

    @on(Input.Changed, "#tree-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(StrategyTree).set_filter(event.value, self.view)
        self._show_filter_title()

    @on(Input.Submitted, "#tree-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self.query_one(StrategyTree).focus()

    @on(events.DescendantBlur, "#tree-filter")
    def _filter_left(self, event: events.DescendantBlur) -> None:
        tree_filter = self.query_one(TreeFilter)
        tree_filter.set_class(bool(tree_filter.value), "-shown")  # kept on while it filters

    def _show_filter_title(self) -> None:
        text = self.query_one(StrategyTree).filter_text
        title = f"strategy graph · filter: {text}" if text else "strategy graph"
        self.query_one("#strategy-title", Label).update(title)

    async def action_filter_tree(self) -> None:
        # mounted on first use: composed hidden with the screen, it left toasts with no
        # region (test_notifications_stay_off_the_gates_table; the cause is not found)
        found = self.query(TreeFilter)
        if found:
            tree_filter = found.first()
        else:
            tree_filter = TreeFilter(id="tree-filter")
            await self.query_one("#left").mount(tree_filter, before=self.query_one(StrategyTree))
        tree_filter.add_class("-shown")
        tree_filter.focus()

    def action_clear_filter(self) -> None:
        for tree_filter in self.query(TreeFilter):
            tree_filter.value = ""  # Input.Changed clears the tree's filter and its title
            tree_filter.remove_class("-shown")
        self.query_one(StrategyTree).focus()

    @on(GatesPanel.GateChosen)
    def _gate_chosen(self, event: GatesPanel.GateChosen) -> None:
        self.action_open_gate(event.gate_id)

    @on(GatesPanel.RowMoved)
    def _gate_row_moved(self, event: GatesPanel.RowMoved) -> None:
        self.bindings_may_change()

    # --- action availability ----------------------------------------------------------

    @property
    def kl_app(self) -> Any:
        """The KernelLadderApp (its fold and bridge are read here, never changed)."""
        return self.app

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("export_best", "deploy_attempt") and getattr(self.kl_app, "read_only", False):
            return None  # it writes files where the app runs: not a viewer's to do
        if isinstance(self.focused, Input) and action in TYPED_OVER:
            return False  # typing a filter: G and home are letters, not replay jumps
        if action == "clear_filter":
            return bool(self.query_one(StrategyTree).filter_text)
        # p offers Pause or Resume, whichever applies (a finished run shows Pause, dimmed)
        if action == "resume_run" and self.view.state != v.RUN_PAUSED:
            return False
        if action == "pause_run" and self.view.state == v.RUN_PAUSED:
            return False
        # b likewise: Pause br. or Resume br., as the selected branch is
        branch = self.view.branch(self.selected_branch)
        if action == "resume_branch" and not (branch is not None and branch.paused):
            return False
        if action == "pause_branch" and branch is not None and branch.paused:
            return False
        if action in STEERING_ACTIONS:
            return None if self.steering_refusal() or self.refusal(action) else True
        if action in REPLAY_ACTIONS:
            return self.replay
        return True

    def on_key(self, event: events.Key) -> None:
        """A steering key that does not apply now (shown dimmed in the footer) says why,
        once, where it did nothing silently."""
        active = self.active_bindings.get(event.key)
        if active is None or active.enabled:
            return
        name = active.binding.action.split("(", 1)[0]
        if name in STEERING_ACTIONS:
            why = self.steering_refusal() or self.refusal(name)
            if why:
                event.stop()
                self.notify(why, severity="warning", timeout=3)

    def palette_refusal(self, action: str) -> str | None:
        """Why a palette command cannot be done now (the palette says it beside the
        command, and again when it is chosen), or None when it can."""
        name = action.split("(", 1)[0]
        if name in STEERING_ACTIONS and (why := self.steering_refusal() or self.refusal(name)):
            return why
        if name in REPLAY_ACTIONS and not self.replay:
            return "Only a replay has play, step and jump."
        return None

    async def run_from_palette(self, action: str) -> None:
        if why := self.palette_refusal(action):
            self.notify(why, severity="warning")
            return
        await self.run_action(action)

    # --- non-steering actions ---------------------------------------------------------

    def action_export_best(self) -> None:
        if getattr(self.kl_app, "read_only", False):
            self.notify("This is a read-only view: export is off.", severity="warning")
            return
        best = self.view.best_attempt
        if best is None:
            self.notify("No passing attempt yet: nothing to export.", severity="warning")
            return
        source = self.files.source(best)
        if source is None:
            self.notify(f"The source of #{best} is not available.", severity="error")
            return

        def done(path: str | None) -> None:
            if path is None:
                return
            target = Path(path).expanduser().absolute()  # the message says where, in full
            try:
                target.write_text(source, encoding="utf-8")
            except OSError as exc:
                self.notify(f"Could not write {target}: {exc.strerror}", severity="error")
                return
            self.notify(f"Wrote the best kernel (#{best}) to {target}.")

        self.app.push_screen(
            InputPrompt(
                f"Export the best kernel (#{best})",
                "Path of the file to write (it must not exist yet).",
                value=f"best_{self.view.op}_{best}.py",
                check=export_path_error,
            ),
            done,
        )

    def action_deploy_attempt(self) -> None:
        if getattr(self.kl_app, "read_only", False):
            self.notify("This is a read-only view: deploy is off.", severity="warning")
            return
        attempt = self._need_attempt("Select an attempt to deploy.")
        if attempt is None:
            return
        if self.files.run_dir is None:
            self.notify("This run has no directory to deploy from.", severity="warning")
            return
        if self.files.source(attempt.number) is None:
            self.notify(f"The source of #{attempt.number} is not saved yet.", severity="warning")
            return
        self.query_one(StrategyTree).follow = False  # the tab stays on the deployed attempt
        self.query_one(AttemptPanel).active = "tab-deploy"
        self.post_message(DeployRequested(attempt.number))

    def refresh_deploys(self) -> None:
        """The Deploy tab, after a deploy moved on (the app's worker)."""
        panel = self.query_one(AttemptPanel)
        if panel.active == "tab-deploy":
            panel.refresh_deploys()

    def action_follow_newest(self) -> None:
        tree = self.query_one(StrategyTree)
        tree.follow = True
        newest = max(self.view.attempts, default=None)
        if newest is not None:
            tree.select_attempt(newest)

    def action_toggle_chart_series(self) -> None:
        series = self.query_one(SpeedupChart).toggle_series()
        self.notify(f"chart: {series}", timeout=2)

    def action_show_tab(self, tab: str) -> None:
        self.query_one(AttemptPanel).active = tab

    def action_help(self) -> None:
        sections = []
        for prefix, title in SECTIONS:
            bindings = [b for b in self.BINDINGS if (b.id or "").startswith(prefix + ".")]
            if prefix == "replay" and not self.replay:
                continue
            if prefix == "app":
                bindings = [b for b in self.app.BINDINGS if isinstance(b, Binding)]
            sections.append((title, bindings))
        sections.insert(-1, ("Navigation", navigation_bindings()))
        note = (
            "escape, ? or q closes this. Every action is also in the command palette "
            "(ctrl+p). On a narrow terminal the footer leaves some keys out: all of them "
            "are here."
        )
        if self.replay:
            note += " In a replay, steering is off."
        self.app.push_screen(HelpScreen(sections, note))

    # --- replay actions ---------------------------------------------------------------

    def action_replay_toggle(self) -> None:
        self.post_message(ReplayToggled())

    def action_replay_step(self, n: int) -> None:
        self.post_message(ReplaySeekRequested(n, relative=True))

    def action_replay_end(self) -> None:
        self.post_message(ReplaySeekRequested(10**12))

    def action_replay_start(self) -> None:
        self.post_message(ReplaySeekRequested(0))

    def action_replay_faster(self) -> None:
        self.post_message(ReplaySpeedRequested(faster=True))

    def action_replay_slower(self) -> None:
        self.post_message(ReplaySpeedRequested(faster=False))

    # --- for tests and the replay-equals-live check -----------------------------------

    def screen_state(self) -> dict[str, Any]:
        """What the screen shows, as plain text, independent of the event source."""
        tree = self.query_one(StrategyTree)
        lines = []

        def walk(node, depth: int) -> None:
            for child in node.children:
                lines.append("  " * depth + child.label.plain)
                walk(child, depth + 1)

        walk(tree.root, 0)
        header = self.query_one(RunHeader)
        gates = self.query_one(GatesPanel)
        return {
            "header": str(header.render().plain),
            "tree": lines,
            "gates": [g.gate_id for g in self.view.gates],
            "gate_rows": gates.row_count,
            "chart": [
                "".join(text for text, _ in row)
                for row in self.query_one(SpeedupChart)._layout(self.query_one(SpeedupChart).size)
            ],
            "state": self.view.state,
            "best": (self.view.best_attempt, self.view.best_speedup),
            "hints": self.view.hints,
            "branches": [(b.branch_id, b.state, b.rule, b.hints) for b in self.view.branches],
        }
