"""The thread that completes the futures of a hook state's buckets.

DDP wants a future from the hook at once and waits for it only at the end
of the backward pass, so the hook issues shoal's non-blocking call and
returns; something must then see the call complete and set the future.
One thread per hook state does that: it takes the buckets in the order the
hook issued them (the order in which the communicator completes them too),
waits their shoal requests (Request.wait lets the GIL go while it blocks,
so the training thread runs on), runs the bucket's copy-out, and sets the
future's result, or its exception when a request failed. Callbacks chained
on a future with then() run on this thread.
"""

import collections
import threading


class Waiter:
    """A queue of (requests, finish, future) served by one daemon thread.

    submit() is called by the thread that runs the hook; drain() and
    close() by any thread. finish() returns the future's value once every
    request completed; an exception of a request or of finish becomes the
    future's exception."""

    def __init__(self, name):
        self._items = collections.deque()
        self._cond = threading.Condition()
        self._pending = 0
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, requests, finish, future):
        with self._cond:
            if self._closing:
                raise RuntimeError("the hook state is closed")
            self._items.append((requests, finish, future))
            self._pending += 1
            self._cond.notify_all()

    def drain(self):
        """Return once every submitted bucket's future is set."""
        with self._cond:
            while self._pending:
                self._cond.wait()

    def close(self):
        """Complete what was submitted, then end the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _loop(self):
        while True:
            with self._cond:
                while not self._items and not self._closing:
                    self._cond.wait()
                if not self._items:
                    return
                requests, finish, future = self._items.popleft()
            self._complete(requests, finish, future)
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    @staticmethod
    def _complete(requests, finish, future):
        # Every request is waited, even after one failed: each holds its
        # buffers until it completes, and the communicator expects them
        # collected. The first failure is the future's.
        error = None
        for req in requests:
            try:
                req.wait()
            except BaseException as e:  # noqa: BLE001 (handed to the future)
                error = error or e
        try:
            if error is None:
                value = finish()
        except BaseException as e:  # noqa: BLE001 (handed to the future)
            error = e
        try:
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)
        except BaseException:  # noqa: BLE001 (a future set twice: nothing to tell)
            pass
