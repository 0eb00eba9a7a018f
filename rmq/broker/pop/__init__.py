"""RocketMQ 5's POP consumption in the broker: the pop / ack / change-invisible-time
service (pop_service.py), the revive loop that re-delivers what was not acked in time
(revive.py), the revive log's records (revive_log.py) and FIFO state (order_info.py)."""
