"""The boundary every HTTP request crosses: who is calling, what they may read, how fast.

A request meets these modules in this order (http.py stacks them; the transports call this room,
never the reverse):

    gate.py       first, before a byte of the body is read: the Host and Origin headers
                  (access.HostCheck), then the credential — a bearer header, or on the web pages
                  the login cookie the web door admits — checked by the verifier; 401, 403, 413,
                  then the body read within its limit and deadline (408)
    verifiers.py  which credentials are good: the single MCPOWER_TOKEN (access.StaticTokenVerifier),
                  named tokens (tokens.py's file, re-read when it changes), OAuth access tokens
                  (oauth.py, with the issuer's keys from jwks.py), composed with FirstOf; each
                  answers an AccessToken in callers.py's terms
    callers.py    who the credential stands for (a Caller: a name and dataset patterns) and the one
                  rule for which datasets a caller reads (allowed); visible() gives the registry
                  view every door reads through (scoped.py: the other datasets answer as unknown)
    ratelimit.py  after the gate has named the caller: its request rate and searches in flight (429)

Then the transport (sessions, the MCP app, the web pages) serves the request as that caller.

    access.py     the single token, the Host/Origin matching, and whether an address needs a token
    tokens.py     the named tokens file itself (no SDK: the CLI's `token` commands use it alone)
    oauth.py      OAuth resource-server mode: JWTs checked, mapped to callers; RFC 9728 metadata
    jwks.py       the issuer's signing keys: discovered, fetched within bounds, cached, rotated
    scoped.py     a registry limited to some datasets (a caller's)

Nothing is imported here: each module is loaded only by what needs it.
"""
