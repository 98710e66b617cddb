"""Test harness for metaq and its users: real ZooKeeper and broker processes as pytest fixtures."""
