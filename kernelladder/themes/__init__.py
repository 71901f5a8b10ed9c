"""Textual themes and stylesheets of the project."""
