"""What talking to Alibaba Cloud (or its local stand-ins) needs, in one place: credentials,
signature verifiers for the local endpoints, bounded polling and the outbound policy."""
