"""The one exception type that the CLI turns into a one-line message."""


class UserError(Exception):
    """Bad input from the user: the message names the problem and the fix.

    The CLI prints it on one line and exits with status 2, without a traceback
    (unless ``--debug``), so that a typo never looks like a crash.
    """
