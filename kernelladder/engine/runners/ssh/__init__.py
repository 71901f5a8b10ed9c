"""Remote verification over SSH (imported only when a run is remote: it needs asyncssh).

config.py   the remote settings, environment and TOML pool file -> RemoteConfig
link.py     one host: verified connection, host-key checks, worker commands
sync.py     the ops/ and verifier/ tree mirrored on the box, keyed by content
pool.py     PoolRunner (several hosts and GPUs), SSHRunner, make_remote_runner
"""
