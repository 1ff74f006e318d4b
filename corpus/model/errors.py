"""The one exception type the command line turns into a one-line error and a non-zero exit."""


class UserError(Exception):
    """Bad arguments or bad input: the message says what is wrong and what to do about it."""
