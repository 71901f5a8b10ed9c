"""What the caller's process and the worker's share, torch-free: the wire between them, the
verdict, and the worker process's environment, scratch directory, walls and source files."""
