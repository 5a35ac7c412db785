"""How a Kafka look-up fails, as its callers tell the cases apart: the brokers away
(`KafkaUnavailable`), the SASL credentials refused or the TLS handshake failed (both
`KafkaUnavailable` too), a subscribed topic unknown; and librdkafka's error callback that
keeps the last authentication or TLS error, which the request itself only sees as a timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka import KafkaError


class KafkaUnavailable(RuntimeError):
    pass


class KafkaAuthFailed(KafkaUnavailable):
    """The broker refused the SASL credentials (wrong user name, password or mechanism)."""


class KafkaTLSFailed(KafkaUnavailable):
    """The TLS handshake failed: most often the broker's certificate does not verify
    against the configured CA (or the host name is not among its names)."""


class UnknownTopic(RuntimeError):
    pass


class SecurityErrors:
    """librdkafka's error callback: keeps the last authentication or TLS error (its text
    names the broker and the cause, never a credential)."""

    def __init__(self) -> None:
        self.last: tuple[type[KafkaUnavailable], str] | None = None

    def __call__(self, error: KafkaError) -> None:
        from confluent_kafka import KafkaError

        kinds = {KafkaError._AUTHENTICATION: KafkaAuthFailed, KafkaError._SSL: KafkaTLSFailed}
        kind = kinds.get(error.code())
        if kind is not None:
            self.last = (kind, error.str())

    def error(self, bootstrap: str) -> KafkaUnavailable | None:
        if self.last is None:
            return None
        kind, text = self.last
        cause = (
            "authentication failed (SASL): the broker refused the user name or password"
            if kind is KafkaAuthFailed
            else "certificate verify failed (TLS): the broker's certificate is not signed by "
            "the configured CA or does not name the host"
        )
        return kind(f"Kafka at {bootstrap}: {cause} ({text})")
