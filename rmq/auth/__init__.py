"""Sans-IO access control (RocketMQ 4.9.8 "plain ACL", spec rocketmq-4x-acl-tls.md).

* ``signing``: the content a client signs, HMAC-SHA1 + Base64, client-side signing and
  constant-time verification;
* ``address``: remote-address patterns (``whiteRemoteAddress``, ``globalWhiteRemoteAddresses``);
* ``acl_config``: the plain_acl.yml model, the multi-file loader, and the document
  rewrites behind the ACL-management request codes 50-53;
* ``permissions``: resources per request code, the admin-only codes, ``validate`` in
  4.9.8's order of checks, and the failure answer; ``decision``: its verdict types;
* ``cache``: the bounded memo behind the per-request check (signing orders, white-list
  matches, verdicts), kept on the account / set it is derived from.

Nothing here opens a socket or runs an event loop; only ``acl_config.load_acl`` reads files.
"""
