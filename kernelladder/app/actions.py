"""Every action of the app, declared once: its key, the screen's action, the footer's
label and tooltip, whether it steers the run (off in a replay and after the end) or
works only in a replay, its place in the command palette and in the narrow footer's
drop order. MainScreen.BINDINGS, the app's BINDINGS, the command palette, the help
screen's sections and STEERING_ACTIONS / REPLAY_ACTIONS are all built from ACTIONS.

What a steering action sends to the engine is a RunControl command (engine/run/control.py
STEERING_COMMANDS, which the bridge accepts): the engine cannot import the app."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

APP, STEER, VIEW, REPLAY = "app", "steer", "view", "replay"
# the help screen's sections, in order (an action's id starts with its section)
SECTIONS = ((STEER, "Steering"), (VIEW, "View"), (REPLAY, "Replay"), (APP, "App"))


@dataclass(frozen=True)
class Action:
    id: str  # "<section>.<name>": the binding's id
    key: str  # Textual key names, comma-separated
    action: str  # the screen's (or app's) action, with its arguments
    description: str  # the footer's and the help screen's label
    tooltip: str
    show: bool = True  # in the footer (the help screen lists every action)
    key_display: str | None = None
    priority: bool = False  # before a focused widget's own binding of the key
    palette: tuple[int, str, str] | None = None  # (position, title, help) in the palette
    footer_drop: int | None = None  # a narrow footer leaves it out this early (1: first)

    @property
    def section(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def screen_action(self) -> str:
        """The action as the main screen runs it (the app's own with their namespace)."""
        return f"app.{self.action}" if self.section == APP else self.action

    @property
    def name(self) -> str:
        """The action without its arguments: replay_step(1) -> replay_step."""
        return self.action.split("(", 1)[0]

    @property
    def steers(self) -> bool:
        """Steers the run: off in a replay and once the run is over."""
        return self.section == STEER

    @property
    def replay_only(self) -> bool:
        return self.section == REPLAY

    def binding(self) -> Binding:
        return Binding(
            self.key,
            self.action,
            self.description,
            show=self.show,
            key_display=self.key_display,
            priority=self.priority,
            tooltip=self.tooltip,
            id=self.id,
        )


_QUIT_TIP = "Quit (asks whether to stop a running run)"

ACTIONS: tuple[Action, ...] = (
    # The main screen's, in footer order. Replay keys first: the footer lists keys in
    # this order and shows one binding per key, so in a replay `p` reads Play (not a
    # disabled Pause) and the replay keys are not pushed off a narrow footer by the
    # disabled steering keys. Off in a live run.
    Action("replay.toggle", "p", "replay_toggle", "Play", "Play or pause the replay",
           palette=(19, "Replay: play / pause", "Replay only")),
    Action("replay.back", "comma", "replay_step(-1)", "Back", "Step one event back",
           key_display=",", palette=(21, "Replay: step back", "One event back")),
    Action("replay.forward", "full_stop", "replay_step(1)", "Step", "Step one event forward",
           key_display=".", palette=(20, "Replay: step forward", "One event forward")),
    # priority: before the tree's own end key; off outside a replay
    Action("replay.end", "G,end", "replay_end", "End", "Jump to the end of the run",
           key_display="G", priority=True,
           palette=(22, "Replay: jump to end", "Show the final state")),
    Action("replay.start", "home", "replay_start", "Start", "Jump to the start of the run",
           show=False, priority=True,
           palette=(23, "Replay: jump to start", "Show the first event")),
    Action("replay.faster", "plus,equals_sign", "replay_faster", "Faster", "Play faster",
           key_display="+", palette=(24, "Replay: faster", "Double the speed")),
    Action("replay.slower", "minus", "replay_slower", "Slower", "Play slower",
           key_display="-", palette=(25, "Replay: slower", "Halve the speed")),
    Action("steer.prune", "x", "prune_branch", "Prune",
           "Prune the selected branch and every branch opened from it (asks first)",
           palette=(1, "Prune selected branch", "Stop the branch and its subtree"),
           footer_drop=4),
    Action("steer.hints", "h", "edit_hints", "Hints",
           "Edit the global hints the next proposals get",
           palette=(2, "Edit global hints", "Hints for every branch's next proposals"),
           footer_drop=5),
    Action("steer.branch_hints", "H", "edit_branch_hints", "Br.hints",
           "Edit the selected branch's hints",
           palette=(3, "Edit branch hints", "Hints for the selected branch's next proposals"),
           footer_drop=2),
    Action("steer.approve", "a", "approve_gate", "Approve", "Approve the selected pending gate",
           palette=(4, "Approve selected gate", "Let the risky move be verified"),
           footer_drop=10),
    Action("steer.veto", "v", "veto_gate", "Veto",
           "Veto the selected pending gate: the move becomes a dead end",
           palette=(5, "Veto selected gate", "Make the move a dead end of its branch"),
           footer_drop=9),
    Action("steer.gate", "g", "open_gate", "Gate",
           "Open the selected gate's prompt (also enter on a gate)", show=False,
           palette=(6, "Open gate prompt", "See the selected gate in full and decide")),
    # one key, two rows: the footer offers the one that applies (MainScreen.check_action)
    Action("steer.pause", "p", "pause_run", "Pause", "Pause the whole run",
           palette=(7, "Pause run", "No new proposals while paused"), footer_drop=8),
    Action("steer.resume", "p", "resume_run", "Resume", "Resume the paused run",
           palette=(8, "Resume run", "Proposals go on"), footer_drop=8),
    # one key, two rows, as p: the footer offers what b does to the selected branch
    Action("steer.branch_pause", "b", "pause_branch", "Pause br.", "Pause the selected branch",
           palette=(9, "Pause selected branch", "Hold one branch, others go on"),
           footer_drop=1),
    Action("steer.branch_resume", "b", "resume_branch", "Resume br.",
           "Resume the selected branch",
           palette=(10, "Resume selected branch", "The branch goes on"), footer_drop=1),
    Action("steer.open_branch", "o", "open_branch", "Branch",
           "Open a new branch from the selected attempt",
           palette=(11, "Open branch from selected attempt", "A new line of attack from here"),
           footer_drop=3),
    Action("steer.target", "t", "change_target", "Target", "Change the target speedup",
           palette=(12, "Change target speedup", "Branches stop once they reach it"),
           footer_drop=7),
    Action("steer.stop", "s", "stop_run", "Stop",
           "Stop the run: in-flight attempts finish, the log is closed (asks first)",
           palette=(13, "Stop run", "Finish in-flight attempts and end the run"),
           footer_drop=11),
    Action("view.export", "e", "export_best", "Export", "Write the best passing kernel to a file",
           palette=(14, "Export best kernel", "Write the best passing source to a file"),
           footer_drop=6),
    Action("view.deploy", "d", "deploy_attempt", "Deploy",
           "Put the selected attempt's kernel into a model: check it against the model "
           "without it, time it on a GPU (kernelladder deploy)",
           palette=(15, "Deploy selected attempt into a model",
                    "Check it inside llama-3-8b (a tiny one without a GPU); time it on a GPU"),
           footer_drop=0),
    Action("view.filter", "slash", "filter_tree", "Filter",
           "Filter the strategy graph: only lines holding the text (escape clears)",
           show=False, key_display="/",
           palette=(16, "Filter strategy graph", "Only attempts whose line holds the text")),
    # the filter kept (enter), focus back in the graph: escape still clears it
    Action("view.clear_filter", "escape", "clear_filter", "Clear filter",
           "Clear the strategy graph's filter", show=False),
    Action("view.follow", "f", "follow_newest", "Follow", "Keep the newest attempt selected",
           show=False,
           palette=(17, "Follow newest attempt", "Keep the newest attempt selected")),
    Action("view.chart_series", "F", "toggle_chart_series", "Floor",
           "Chart: vs best <-> fraction of the floor", show=False),
    Action("view.tab_log", "1", "show_tab('tab-log')", "Log", "Show the attempt's live log",
           show=False),
    Action("view.tab_verdict", "2", "show_tab('tab-verdict')", "Verdict",
           "Show the attempt's verdict, gate by gate", show=False),
    Action("view.tab_source", "3", "show_tab('tab-source')", "Source",
           "Show the attempt's source", show=False),
    Action("view.tab_diff", "4", "show_tab('tab-diff')", "Diff",
           "Show the attempt's diff against its parent", show=False),
    Action("view.tab_profile", "5", "show_tab('tab-profile')", "Profile",
           "Show the attempt's Nsight Compute profile", show=False),
    Action("view.tab_deploy", "6", "show_tab('tab-deploy')", "Deploy tab",
           "Show the attempt's deploys into models", show=False),
    Action("view.theme", "T", "app.change_theme", "Theme", "Pick a theme (also --theme NAME)",
           show=False, palette=(26, "Change theme", "Pick a theme (also --theme NAME)")),
    Action("view.help", "question_mark,f1", "help", "Help", "Show the key map",
           key_display="?", palette=(18, "Show key map", "Every key and what it does")),
    # the app's own, on every screen
    Action("app.quit", "q", "quit", "Quit", _QUIT_TIP,
           palette=(27, "Quit", "Asks whether to stop a running run, or detach")),
    # ctrl+c as in most terminal apps: the same question as q (a focused editor copies)
    # ... and pressed again while it asks, the answer: quit
    Action("app.quit_ctrl", "ctrl+q,ctrl+c", "quit(True)", "Quit", _QUIT_TIP, show=False,
           key_display="^q/^c"),
    Action("app.palette", "ctrl+p", "command_palette", "Commands", "Every action by name",
           show=False),
)  # fmt: skip


# The widgets' own keys (Textual's Tree, DataTable, TabbedContent, focus): not actions
# of ours, but the help screen lists them so a person finds their way.
NAVIGATION: tuple[tuple[str, str, str], ...] = (
    ("↑ ↓", "Move", "Select an attempt or branch in the graph, a gate in the gates table"),
    ("tab", "Focus", "The next pane: graph, gates table, the attempt's tabs (shift+tab: back)"),
    ("shift+↑ ↓", "Sibling", "The previous or next line at the same level (branch to branch)"),
    ("shift+←", "Parent", "Up from an attempt to its branch"),
    ("space", "Fold", "Fold or unfold a branch in the graph"),
    ("enter", "Open", "On a gate: its prompt"),
    ("← →", "Tabs", "Switch the attempt's tabs when they have focus (or 1-5 anywhere)"),
    ("pgup pgdn", "Scroll", "Scroll the focused pane (the attempt's log, source, diff)"),
    ("escape", "Close", "Close a dialog without sending anything; clear the filter"),
)


def navigation_bindings() -> list[Binding]:
    """NAVIGATION as display-only rows of the help screen."""
    return [
        Binding(key, "", label, key_display=key, tooltip=what) for key, label, what in NAVIGATION
    ]


def screen_bindings() -> list[Binding]:
    """MainScreen.BINDINGS, in footer order."""
    return [a.binding() for a in ACTIONS if a.section != APP]


def app_bindings() -> list[Binding]:
    """KernelLadderApp.BINDINGS."""
    return [a.binding() for a in ACTIONS if a.section == APP]


def palette_actions() -> tuple[Action, ...]:
    """The command palette's entries, in its order."""
    listed = [a for a in ACTIONS if a.palette is not None]
    return tuple(sorted(listed, key=lambda a: a.palette[0]))  # type: ignore[index]


def footer_drop_order() -> tuple[str, ...]:
    """On a narrow terminal the footer leaves keys out in this order (after the disabled
    ones) until its row fits; keys not listed (Help, Quit) always stay, and the palette's
    key goes before they would not fit; the help screen lists them all."""
    dropped = [a for a in ACTIONS if a.footer_drop is not None]
    return tuple(a.id for a in sorted(dropped, key=lambda a: a.footer_drop))  # type: ignore[arg-type, return-value]


STEERING_ACTIONS = frozenset(a.name for a in ACTIONS if a.steers)
REPLAY_ACTIONS = frozenset(a.name for a in ACTIONS if a.replay_only)
