"""Subcommands of the `fp8rl` CLI: one module per area, each with `register(subparsers)`."""
