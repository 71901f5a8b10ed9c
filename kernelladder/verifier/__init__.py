"""Layer: the fixed verifier (imports ops, torch, triton; never engine or app)."""
