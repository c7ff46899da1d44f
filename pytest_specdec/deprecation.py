"""The warning an old spelling gives: every layer may raise it, so it lives below them all."""


class SpecdecDeprecationWarning(DeprecationWarning):
    """An old spelling of an option or name that still works, for now."""
