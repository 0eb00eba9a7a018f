"""The ground floor: small pieces every layer shares (clock, files, network, RocketMQ's
system names, its JSON dialect, async-with mixins, delegation). Imports nothing of ours, no
asyncio (the sans-IO layers import it too; the loop base is rmq.runtime), and does no I/O at
import time."""
