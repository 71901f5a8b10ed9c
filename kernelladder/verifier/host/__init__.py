"""The verifier in the caller's process (the engine's, a Ray actor's): workers started,
kept, shared and spoken to, and Nsight Compute profiles run. No torch; never imports
worker/."""
