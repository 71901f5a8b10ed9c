"""Layer: a found kernel inside a real model (`kernelladder deploy`, docs/DEPLOY.md).

Above the engine (it reads a run's log and records its result there as an event), below
the CLI and the app; `transformers` is imported only when a model is built (the deploy
extra), and a result is read without torch.
"""
