"""The boundary every HTTP request crosses: who is calling, what they may read, how fast.

A request meets these modules in this order (http.py stacks them; the transports call this room,
never the reverse):

    gate.py       first, before a byte of the body is read: the Host and Origin headers
                  (access.HostCheck), then the credential — a bearer header, or on the web pages
                  the sign-in session (logins.py) the web door looks up — checked by the verifier,
                  unless the client's address is out of attempts (attempts.py: 429); 401, 403,
                  413, each refusal logged with its reason; then the body read within its limit
                  and deadline (408). The one place credentials are checked (gate.Admitted, just
                  before the app, only makes sure none got past without a caller)
    verifiers.py  which credentials are good: the single MCPOWER_TOKEN (access.StaticTokenVerifier),
                  named tokens (tokens.py's file, re-read when it changes), OAuth access tokens
                  (oauth.py, with the issuer's keys from jwks.py), composed with FirstOf; each
                  answers an AccessToken in callers.py's terms, or a Refusal saying why
    callers.py    who the credential stands for (a Caller: a name that says how it authenticated,
                  dataset patterns, whether it reads /metrics) and the one
                  rule for which datasets a caller reads (allowed); visible() gives the registry
                  view every door reads through (scoped.py: the other datasets answer as unknown)
    ratelimit.py  after the gate has named the caller: its request rate and searches in flight (429)

Then the transport (sessions, the MCP app, the web pages) serves the request as that caller.

    access.py     the single token, the Host/Origin matching, and whether an address needs a token
    tokens.py     the named tokens file itself (no SDK: the CLI's `token` commands use it alone)
    oauth.py      OAuth resource-server mode: JWTs checked, mapped to callers; RFC 9728 metadata
    jwks.py       the issuer's signing keys: discovered, fetched within bounds, cached, rotated
    scoped.py     a registry limited to some datasets (a caller's)
    attempts.py   failed attempts per client address (a token no verifier knows, a failed sign-in)
    logins.py     the web pages' sign-in sessions: a random id, never the token; judged again each page

Nothing is imported here: each module is loaded only by what needs it.
"""
