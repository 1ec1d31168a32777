"""The one exception type that the command line turns into a one-line error."""


class UserError(Exception):
    """Bad input that the user can fix: the message names the file or key and the fix.

    `posenc` prints it as one line and exits with status 2; every other exception is a bug
    and keeps its traceback.
    """
