class TransportError(Exception):
    """A failed send. permanent=True: retrying cannot help (4xx, bad address); the channel is marked failing."""

    def __init__(self, message, *, permanent=False):
        super().__init__(message)
        self.permanent = permanent


class Transport:
    def __init__(self, channel):
        self.channel = channel

    def send(self, delivery):
        """Send DELIVERY once; return on success, raise TransportError otherwise."""
        raise NotImplementedError
