"""The `inspect` command line (Typer). Nothing here imports torch at module level."""
