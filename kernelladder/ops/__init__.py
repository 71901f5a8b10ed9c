"""Layer: the fixed op contracts, one folder per built-in op (imports torch only)."""
