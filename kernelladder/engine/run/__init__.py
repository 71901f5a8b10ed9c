"""The run: setting one up or resuming it, scheduling proposals and verifications
across its branches, its gates and exit rules, steering it while it runs, and the
control channel others attach through, and the run options. Writes the record (record/)."""
