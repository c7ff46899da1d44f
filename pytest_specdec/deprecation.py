"""The warning an old spelling gives: every layer may raise it, so it lives below them all."""


class SpecdecDeprecationWarning(DeprecationWarning):
    """An old spelling of an option or name that still works, for now."""


def renamed(old: str, new: str) -> SpecdecDeprecationWarning:
    """The warning a name gives that a later one replaced (it serves every engine, not only vLLM)."""
    return SpecdecDeprecationWarning(
        f"{old} is now {new} (it serves every engine, not only vLLM); the old name will be removed in a later release"
    )
