"""Layer: the fixed verifier (imports ops, torch, triton; never engine or app), by the
process a file runs in: worker/ (the sandboxed worker, with torch), host/ (the caller's
process) and contract/ (torch-free, shared by both)."""
