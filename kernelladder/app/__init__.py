"""Layer: the Textual UI and the headless (rich) reporter."""
