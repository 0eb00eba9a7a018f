"""The asyncio floor, one above rmq.common: RocketMQ's ServiceThread as a background-loop base
(ServiceLoop, PeriodicService, TaskSet). Every asyncio layer (store, remoting, HA, broker,
client, NameServer) imports it; the sans-IO layers (protocol, auth) never do. Imports nothing of
ours but rmq.common."""
