"""Layer: a run: events, log, graph, scheduler, proposers, runners (never textual)."""
