"""The one error type every rmq codec raises on malformed input."""


class ProtocolError(ValueError):
    """Bytes that do not follow the RocketMQ wire or disk format.

    Codecs raise only this on bad input (never a bare IndexError, struct.error or
    UnicodeDecodeError), so a transport can close exactly one connection and a
    recovery scan can stop at exactly one record.
    """
