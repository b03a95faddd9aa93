"""What talking to Alibaba Cloud (or its local stand-ins) needs, in one place.

`credentials` (from the FC context or the environment, never shown), `signing/` (the signature
verifiers of our local endpoints: FC 2.0, MNS, ACS3-HMAC-SHA256, RPC v1, CloudStack), `poll`
(poll until done, bounded by a deadline and an invocation's budget) and `http` (the outbound
policy of every HTTP client we write ourselves). Nothing is imported here: `import crhelper`
loads none of it.
"""
