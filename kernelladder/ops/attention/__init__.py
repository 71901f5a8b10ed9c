"""The built-in op attention: its spec (spec.py), its starting candidate (start.py) and the
built-in search's kernel families for it (families.py, with the Gluon kernels of the Hopper
families in wgmma.py and wgmma_persistent.py, and notes.py: what the prompts are told)."""

PLACE = 2  # where it stands among the built-in ops (listings, help)
