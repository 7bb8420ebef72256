"""Subcommands beyond ``plan``: registered with ``specgen.cli.command``."""
