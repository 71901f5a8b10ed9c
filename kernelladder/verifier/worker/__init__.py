"""The sandboxed worker (`python -m kernelladder.verifier.worker`): a candidate loaded,
fenced, checked and timed against the op's reference, with torch and triton. Never
imports host/. Nothing is imported here: the device decides how triton loads."""
