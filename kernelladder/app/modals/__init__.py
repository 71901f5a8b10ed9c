"""Modal screens: confirmations, editors, prompts and the help screen."""
