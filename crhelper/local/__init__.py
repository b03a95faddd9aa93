"""Local stand-ins for the cloud: the ResponseURL server, Function Compute and MNS endpoints."""
