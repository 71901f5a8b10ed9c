"""Trust an UNKNOWN host key after seeing its fingerprint? Dismissed with True or False.

Only ever shown for a key that known_hosts does not hold at all: a changed key is never
offered (the app shows its error instead).
"""

from __future__ import annotations

from pathlib import Path

from kernelladder.app.modals.confirm import ConfirmScreen


def trust_question(host: str, port: int, fingerprint: str, known_hosts: Path | str) -> str:
    return (
        f"host:        {host}\n"
        f"port:        {port}\n"
        f"fingerprint: {fingerprint}\n"
        f"known_hosts: {known_hosts}\n\n"
        "Trust it only if this fingerprint is the box's own (on the box: "
        "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub). Trust adds the key to "
        "known_hosts and starts the run."
    )


class TrustHostKeyScreen(ConfirmScreen):
    DEFAULT_CSS = """
    TrustHostKeyScreen > Vertical {
        width: 96;
    }
    """

    def __init__(self, host: str, port: int, fingerprint: str, known_hosts: Path | str) -> None:
        super().__init__(
            "Unknown SSH host key",
            trust_question(host, port, fingerprint, known_hosts),
            yes="Trust",
            no="Cancel",
        )
        self.host = host
        self.port = port
        self.fingerprint = fingerprint
        self.known_hosts = Path(known_hosts)
