"""Sans-IO codecs: bytes in, objects out; no sockets, no files, no asyncio."""
