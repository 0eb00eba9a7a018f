"""The ground floor: small pieces every layer shares (clock, files, network, RocketMQ's
system names, its JSON dialect, the background-loop base). Imports nothing of ours and does
no I/O at import time."""
