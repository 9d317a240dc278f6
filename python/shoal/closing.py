"""What every object that owns shoal resources shares: a close() that
frees them (and does nothing the second time), a with-block that calls it,
and a finaliser that calls it for objects the program dropped."""


class Closing:
    """Mixin for classes with an idempotent close()."""

    def close(self):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass
