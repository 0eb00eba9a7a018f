"""rmq.remoting."""
