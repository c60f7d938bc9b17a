"""Error types. Every user-facing error names the argument at fault.

``ContractError`` (a ``ValueError``) is raised by the ops when an input breaks
the op contract (SPEC §3); the CLI turns it, like ``UsageError``, into one line
and exit code 2. ``VerificationFailed`` means a path produced a wrong answer
(exit code 1). ``Unavailable`` means the requested path or op cannot run on
this machine (no GPU, not Hopper, no nvcc); the CLI prints one line and exits 1.
"""


class MqaTopkError(Exception):
    """Base class of the tool's own errors."""


class ContractError(MqaTopkError, ValueError):
    """An argument breaks the op contract; the message starts with its name."""

    def __init__(self, arg: str, message: str):
        self.arg = arg
        super().__init__(f"{arg}: {message}")


class UsageError(MqaTopkError):
    """Bad CLI/config/file input; the message names the option or file."""


class Unavailable(MqaTopkError):
    """The path/op cannot run here (no CUDA GPU, not sm_90, no nvcc, not built)."""


class VerificationFailed(MqaTopkError):
    """A path returned a wrong result."""


def path_unavailable(name: str, device, reason: str) -> Unavailable:
    """The one-line ``Unavailable`` of a path that cannot run on ``device``, in
    the same words in every command: "the NAME path is unavailable on DEVICE:
    REASON" (a reason that starts with the path's name does not repeat it)."""
    reason = str(reason)
    if reason.startswith(f"{name}: "):
        reason = reason[len(name) + 2:]
    return Unavailable(f"the {name} path is unavailable on {device}: {reason}")
