"""The app's widgets, one per module."""
