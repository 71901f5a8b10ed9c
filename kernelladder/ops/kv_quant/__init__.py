"""The built-in op kv_quant: its spec (spec.py), its starting candidate (start.py) and the
built-in search's kernel families for it (families.py)."""

PLACE = 4  # where it stands among the built-in ops (listings, help)
