"""The selected attempt's Nsight Compute profile: the summary and a bar per throughput."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

BAR_WIDTH = 30
BARS = (
    ("DRAM throughput", "dram_pct"),
    ("SM throughput", "sm_pct"),
    ("Achieved occupancy", "achieved_occupancy_pct"),
    ("L2 hit rate", "l2_hit_pct"),
)
NOT_TAKEN = (
    "no profile of this attempt: profiles are taken of the start, each new best and a "
    "stalled branch's best, on a GPU with Nsight Compute (--profile auto)"
)


def bar(label: str, pct: float | None) -> Content:
    """`label  ██████░░░░  42.6%` in theme colours; n/a when not measured."""
    name = f"{label:<20}"
    if pct is None:
        return Content.assemble((name, "bold"), ("n/a", "$text-muted"))
    filled = round(max(0.0, min(100.0, pct)) / 100 * BAR_WIDTH)
    return Content.assemble(
        (name, "bold"),
        ("█" * filled, "$primary"),
        ("░" * (BAR_WIDTH - filled), "$text-muted"),
        (f" {pct:5.1f}%", ""),
    )


def profile_content(
    attempt: int | None, profile: Mapping[str, Any] | None, profiling: bool = False
) -> Content:
    if attempt is None:
        return Content.styled("no attempt selected", "$text-muted")
    if not profile and profiling:
        return Content.styled(
            f"#{attempt} is being profiled now (Nsight Compute, beside its branch, which "
            "goes on): the summary comes here when it is ready; its log says the stage",
            "$text-muted",
        )
    if not profile:
        return Content.styled(NOT_TAKEN, "$text-muted")
    if profile.get("status") != "ok":
        return Content.styled(
            f"#{attempt}: no profile ({profile.get('reason') or profile.get('status')})",
            "$warning",
        )
    from kernelladder.verifier.host.profile import ProfileSummary

    summary = ProfileSummary.from_dict(profile.get("summary") or {})
    head = f"#{attempt} profiled ({profile.get('reason')}); report {profile.get('report') or 'n/a'}"
    parts = [Content.styled(head, "bold")]
    parts += [bar(label, getattr(summary, key)) for label, key in BARS]
    parts.append(Content(""))
    parts += [Content(line) for line in summary.lines()]
    return Content("\n").join(parts)


class ProfileView(VerticalScroll):
    DEFAULT_CSS = """
    ProfileView {
        background: $surface;
        padding: 0 1;
    }
    """

    def compose(self):
        yield Static(profile_content(None, None), id="profile-text")

    def show(
        self, attempt: int | None, profile: Mapping[str, Any] | None, profiling: bool = False
    ) -> None:
        content = profile_content(attempt, profile, profiling)
        self.query_one("#profile-text", Static).update(content)
