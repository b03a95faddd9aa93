"""Server-side signature verifiers for our local cloud endpoints, one module per scheme.

`fc` (FC 2.0 `Authorization: FC`), `mns` (`Authorization: MNS`), `acs3` (ACS3-HMAC-SHA256, the Tea
SDKs: ECS 7.x, FC 3.0, ROS), `rpc` (RPC v1 HMAC-SHA1: the `aliyun` CLI, older SDKs), `cloudstack`
(the `cs` package). Each takes a `core.WireRequest` as received and returns the access key id that
signed it, or raises `core.SignatureRejected` in the provider's own error vocabulary. Pure and
standard-library only; nothing is imported here, so loading one scheme loads no other.
"""
