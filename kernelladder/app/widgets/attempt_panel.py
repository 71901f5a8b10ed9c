"""The selected attempt: live log, verdict, source, diff, profile and deploys, one tab each.

Only the active tab is brought up to date; the others catch up when they are shown.
"""

from __future__ import annotations

from textual.containers import Vertical
from textual.widgets import TabbedContent, TabPane

from kernelladder.app import view as v
from kernelladder.app.deploys import DeployBoard
from kernelladder.app.folding import AttemptLogs
from kernelladder.app.run_files import RunFiles, starting_candidate
from kernelladder.app.widgets.attempt_log import AttemptLog
from kernelladder.app.widgets.deploy_view import DeployView
from kernelladder.app.widgets.diff_view import DiffView
from kernelladder.app.widgets.profile_view import ProfileView
from kernelladder.app.widgets.source_view import SourceView
from kernelladder.app.widgets.verdict_view import VerdictView
from kernelladder.engine import AttemptStatus

DIFF_LONG = "Diff vs parent"
# each tab's label, long and short: a narrow pane shortens them in this order until the
# row fits (each tab takes its label and a cell either side)
LABELS = {
    "tab-log": ("Log", "Log"),
    "tab-verdict": ("Verdict", "Verdict"),
    "tab-source": ("Source", "Src"),
    "tab-diff": (DIFF_LONG, "Diff"),
    "tab-profile": ("Profile", "Profile"),
    "tab-deploy": ("Deploy", "Deploy"),
}
SHORTENED_FIRST = ("tab-diff", "tab-source")


def tab_labels(width: int) -> dict[str, str]:
    """The labels that fit a pane `width` cells wide, as long as they can be."""
    labels = {tab: long for tab, (long, _) in LABELS.items()}
    for tab in SHORTENED_FIRST:
        if sum(len(label) + 2 for label in labels.values()) <= width:
            break
        labels[tab] = LABELS[tab][1]
    return labels


class AttemptPanel(Vertical):
    DEFAULT_CSS = """
    AttemptPanel {
        height: 1fr;
    }
    AttemptPanel > TabbedContent {
        height: 1fr;
    }
    AttemptPanel ContentSwitcher {
        height: 1fr;
    }
    AttemptPanel TabPane {
        padding: 0;
        height: 1fr;
    }
    """

    def __init__(
        self, files: RunFiles, logs: AttemptLogs, deploys: DeployBoard | None = None, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.files = files
        self.logs = logs
        self.deploys = deploys if deploys is not None else DeployBoard()
        self.attempt: int | None = None
        self._view: v.RunView = v.EMPTY_VIEW
        self._before_seq: int | None = None

    def compose(self):
        with TabbedContent(initial="tab-log", id="attempt-tabs"):
            with TabPane("Log", id="tab-log"):
                yield AttemptLog(id="attempt-log")
            with TabPane("Verdict", id="tab-verdict"):
                yield VerdictView(id="verdict-view")
            with TabPane(LABELS["tab-source"][0], id="tab-source"):
                yield SourceView(id="source-view")
            with TabPane(DIFF_LONG, id="tab-diff"):
                yield DiffView(id="diff-view")
            with TabPane("Profile", id="tab-profile"):
                yield ProfileView(id="profile-view")
            with TabPane("Deploy", id="tab-deploy"):
                yield DeployView(id="deploy-view")

    def on_resize(self) -> None:
        """A narrow pane (80 columns) names tabs short, so every tab shows whole:
        "Profile" was cut to "Profi"."""
        contents = self.query_one(TabbedContent)
        for tab_id, label in tab_labels(self.size.width).items():
            tab = contents.get_tab(tab_id)
            if str(tab.label) != label:
                tab.label = label

    @property
    def active(self) -> str:
        return self.query_one(TabbedContent).active

    @active.setter
    def active(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def show(
        self,
        view: v.RunView,
        attempt: int | None,
        *,
        before_seq: int | None = None,
        rewind: bool = False,
    ) -> None:
        """Bring the panel up to `view` with `attempt` selected. `before_seq` hides log
        lines of events not yet replayed; `rewind` redraws the log from scratch."""
        changed = attempt != self.attempt or rewind or before_seq != self._before_seq
        self._view = view
        self.attempt = attempt
        self._before_seq = before_seq
        log = self.query_one(AttemptLog)
        if changed or log.attempt != attempt:
            lines = self.logs.lines(attempt, before_seq) if attempt is not None else []
            log.show_attempt(attempt, lines)
        elif attempt is not None and self.logs.count(attempt) > log.shown:
            log.append(self.logs.lines(attempt, before_seq, start=log.shown))
        self._refresh_tab(self.active)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        event.stop()
        self._refresh_tab(event.pane.id or "")

    def _refresh_tab(self, tab: str) -> None:
        n = self.attempt
        attempt = self._view.attempts.get(n) if n is not None else None
        if tab == "tab-verdict":
            verdict = (
                self.files.verdict(n) if attempt and attempt.state == AttemptStatus.JUDGED else None
            )
            self.query_one(VerdictView).show(attempt, verdict)
        elif tab == "tab-source":
            self.query_one(SourceView).show(n, self.files.source(n) if n is not None else None)
        elif tab == "tab-profile":
            profile = self._view.profiles.get(n) if n is not None else None
            profiling = attempt is not None and attempt.stage == "profile"
            self.query_one(ProfileView).show(n, profile, profiling)
        elif tab == "tab-deploy":
            self.refresh_deploys()
        elif tab == "tab-diff":
            if attempt is None:
                self.query_one(DiffView).show(None, None, None, "")
                return
            if attempt.parent is not None:
                parent_source = self.files.source(attempt.parent)
                parent_name = f"#{attempt.parent}"
            else:
                parent_source = starting_candidate(self._view.op)
                parent_name = f"starting candidate ({self._view.op})"
            self.query_one(DiffView).show(n, self.files.source(n), parent_source, parent_name)

    def refresh_deploys(self) -> None:
        """The Deploy tab brought up to the view and the app's running deploys."""
        n = self.attempt
        if n is None:
            self.query_one(DeployView).show(None, ())
            return
        records = self.deploys.records(n, self._view.deploys.get(n, ()))
        self.query_one(DeployView).show(
            n, records, self.deploys.running.get(n), self.deploys.failed.get(n)
        )
