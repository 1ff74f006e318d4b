"""One module per ``corpus`` subcommand; each defines ``register(subparsers)``."""
