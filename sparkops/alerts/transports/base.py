from ..models import Delivery, NotificationChannel


class TransportError(Exception):
    """A failed send. permanent=True: retrying cannot help (4xx, bad address); the channel is marked failing."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class Transport:
    def __init__(self, channel: NotificationChannel) -> None:
        self.channel = channel

    def send(self, delivery: Delivery) -> None:
        """Send DELIVERY once; return on success, raise TransportError otherwise."""
        raise NotImplementedError
