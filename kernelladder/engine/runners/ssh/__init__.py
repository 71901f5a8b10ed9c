"""Remote verification over SSH: a pool of hosts and their GPUs, each reached over a
verified connection (its host key checked), with the verifier's tree mirrored there by
content. Imported only when a run is remote: it needs asyncssh."""
