"""CLI subcommands of deepshare.autoscale (registered by deepshare/cli.py); filled in by its issue."""

from __future__ import annotations

import argparse


def register_cli(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add this package's subcommands to the main parser (none yet)."""
