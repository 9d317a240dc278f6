"""shoal's status codes and the exception that carries them."""

import enum

from . import _lib


class Status(enum.IntEnum):
    """shoal_status_t; the values follow SHOAL_STATUS_LIST in shoal.h."""
    OK = 0
    INPROGRESS = 1
    INVALID_ARG = 2
    NO_MEMORY = 3
    SYSTEM = 4
    TIMEOUT = 5
    PEER = 6
    AUTH = 7
    UNSUPPORTED = 8
    ABORTED = 9
    INTERNAL = 10
    MISMATCH = 11


class ShoalError(Exception):
    """A shoal call failed.

    status: the Status code; reason: shoal's message for this failure (the
    communicator's last error, naming the rank at fault where there is
    one), possibly empty.
    """

    def __init__(self, status, reason="", call=""):
        try:
            self.status = Status(status)
        except ValueError:
            self.status = status
        self.reason = reason
        self.call = call
        text = _lib.lib().shoal_status_string(int(status)).decode(errors="replace")
        head = "%s: %s" % (call, text) if call else text
        super().__init__("%s (%s)" % (head, reason) if reason else head)

    def __reduce__(self):
        # Rebuilt from its parts, not its text (multiprocessing pickles it).
        return (type(self), (int(self.status), self.reason, self.call))


def last_error(handle):
    """The last failure's reason on a communicator handle (None: this
    thread's last failure outside any communicator)."""
    msg = _lib.lib().shoal_comm_last_error(handle)
    return msg.decode(errors="replace") if msg else ""


def check(status, handle=None, call=""):
    """Raise ShoalError for a status other than SHOAL_OK."""
    if status != 0:
        raise ShoalError(status, last_error(handle), call)
