"""Hint directives: the pure parser (understood directives, lines not understood and why)
and the lines the hints editor shows back."""

from __future__ import annotations

from kernelladder.engine.run.directives import (
    FREE_TEXT,
    SEARCH_READS_ONLY_DIRECTIVES,
    directive_lines,
    parse_directives,
)
from kernelladder.engine.run.hints import op_vocabulary, read_hints


def test_each_verb_is_understood_case_insensitively_and_free_text_is_kept_apart():
    d = parse_directives(
        "Prefer two-pass\navoid multi-row\nFIX ept = 8\navoid MAX_WARPS=16\n"
        'try X_EVICT=""\n\nuse fewer registers, please\n'
    )
    assert d.preferred_families == ("two-pass",)
    assert d.avoided_families == {"multi-row"}
    assert d.fixed == {"EPT": "8"}
    assert d.avoided_values == {("MAX_WARPS", "16")}
    assert d.tries == (("X_EVICT", ""),)
    assert d.free_text == ("use fewer registers, please",)
    assert [n.why for n in d.not_understood] == [FREE_TEXT]


def test_malformed_directives_say_why():
    d = parse_directives("fix EPT\ntry two-pass\nprefer EPT=8\navoid two/pass")
    whys = {n.line: n.why for n in d.not_understood}
    assert whys == {
        "fix EPT": "fix takes PARAM=VALUE",
        "try two-pass": "try takes PARAM=VALUE",
        "prefer EPT=8": "prefer takes a family, not PARAM=VALUE",
        "avoid two/pass": "avoid takes a family name",
    }
    assert d.understood == ()


def test_a_sentence_that_starts_with_a_verb_is_free_text():
    d = parse_directives("prefer fewer rows per program when M is small\ntry to unroll")
    assert d.understood == ()
    assert d.free_text == ("prefer fewer rows per program when M is small", "try to unroll")


def test_names_and_values_are_checked_against_the_ops_vocabulary():
    d = read_hints(
        "prefer Two-Pass\nprefer warp-shuffle\nfix EPT=7\nfix CONST_N=false\nfix NOPE=1",
        op_vocabulary("rmsnorm"),
    )
    assert d.preferred_families == ("two-pass",)  # spelled as the op spells it
    assert d.fixed == {"CONST_N": "False"}
    whys = [n.why for n in d.not_understood]
    assert whys[0].startswith("no family warp-shuffle; this op has ")
    assert whys[1] == "EPT takes one of 4, 8, 16, 32"
    assert whys[2] == "no parameter NOPE for this op"


def test_the_editor_lines_say_that_search_reads_only_directives():
    d = parse_directives("prefer two-pass\nfix EPT\nbe careful with shared memory")
    lines = directive_lines(d, reads_only_directives=True)
    assert lines == [
        "understood: prefer two-pass",
        "not understood: fix EPT (fix takes PARAM=VALUE)",
        "free text: 1 line",
        SEARCH_READS_ONLY_DIRECTIVES,
    ]
    assert SEARCH_READS_ONLY_DIRECTIVES not in directive_lines(d, reads_only_directives=False)
    assert directive_lines(parse_directives(""), reads_only_directives=True) == []
