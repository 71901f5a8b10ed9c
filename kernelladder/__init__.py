"""KernelLadder: watch and steer an agent that writes faster GPU kernels.

Kept free of imports: the verifier and ops subpackages are synced to GPU boxes that
have only torch and triton.
"""

__version__ = "0.1.0"
