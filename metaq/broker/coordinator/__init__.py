"""The group coordinator hosted by the broker: the offsets channel (``__consumer_offsets``) and the group
membership protocol (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup)."""
