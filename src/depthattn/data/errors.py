"""The data pipeline's error type."""


class DataError(ValueError):
    """Bad input data or a broken dataset directory; the message names the file, the problem and the fix."""
