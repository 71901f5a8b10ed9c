"""Layer: the fixed op contracts (imports torch only)."""
